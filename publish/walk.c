/*
 * The walk of the source tree: every directory, regular file and symlink, found with
 * lstat (a symlink is recorded, never followed), plus the plan of each directory's packs.
 * Each directory is opened beneath SRC_DIR's descriptor (pub_open_beneath) and must be the
 * one its parent listed; each entry keeps its st_dev and st_ino for the copy to check.
 * All on the main thread, before any object is written: a tree that cannot be published
 * whole (an unreadable directory, a name no manifest can hold) fails before anything
 * else happens.
 *
 * Packs: a directory's files of 1..pack_under-1 bytes, in name order, fill packs of at most
 * pack_max bytes, each new pack starting when the next member would not fit. Only the
 * directory's own small files decide its packs, so a change elsewhere leaves them alone.
 * Empty files are objects of their own (the one empty object): a pack of nothing but
 * empty files would be an empty object that a server may well refuse to serve. A pack
 * that would hold one file is not made either: that file is an object of its own.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index/index.h"
#include "publish/publish_i.h"

struct walk {
	int src_fd; /* SRC_DIR: every directory is opened beneath it */
	const char *src;
	const struct publish_options *o;
	struct pub_tree *tree;
};

/*
 * Whether len bytes at s are UTF-8 as JSON needs it: no overlong forms, no surrogates,
 * nothing above U+10FFFF. Neither sqlite (json_quote copies bytes as they are) nor libc
 * (mbrtowc depends on the locale) checks this for us, so the rules are written out here.
 */
static bool is_utf8(const unsigned char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned char c = s[i];
		size_t more;
		uint32_t cp, min;

		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xe0) == 0xc0)
			more = 1, cp = c & 0x1f, min = 0x80;
		else if ((c & 0xf0) == 0xe0)
			more = 2, cp = c & 0x0f, min = 0x800;
		else if ((c & 0xf8) == 0xf0)
			more = 3, cp = c & 0x07, min = 0x10000;
		else
			return false;
		if (len - i <= more)
			return false;
		for (size_t k = 1; k <= more; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += more + 1;
	}
	return true;
}

static int push(void ***v, size_t *n, size_t *cap, void *p)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 256;
		void **grown = realloc(*v, c * sizeof(**v));
		if (!grown)
			return -ENOMEM;
		*v = grown;
		*cap = c;
	}
	(*v)[(*n)++] = p;
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_entries(const void *a, const void *b)
{
	return strcmp((*(struct pub_entry *const *)a)->path, (*(struct pub_entry *const *)b)->path);
}

static int cmp_packs(const void *a, const void *b)
{
	return cmp_entries(&(*(struct pub_pack *const *)a)->members[0],
	                   &(*(struct pub_pack *const *)b)->members[0]);
}

/* The names in the directory open at dir, sorted, in *names (owned, as each name). */
static int read_names(DIR *dir, char ***names, size_t *n)
{
	size_t cap = 0;
	struct dirent *d;
	int rc = 0;

	*names = NULL;
	*n = 0;
	for (;;) {
		errno = 0;
		d = readdir(dir);
		if (!d) {
			rc = -errno;
			break;
		}
		if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
			continue;
		char *name = strdup(d->d_name);
		if (!name || push((void ***)names, n, &cap, name) != 0) {
			free(name);
			rc = -ENOMEM;
			break;
		}
	}
	if (rc == 0 && *n) /* qsort's base must not be NULL, even for nothing */
		qsort(*names, *n, sizeof(**names), cmp_names);
	return rc;
}

static const char *skipped_kind(mode_t mode)
{
	return S_ISSOCK(mode)   ? "a socket"
	       : S_ISFIFO(mode) ? "a FIFO"
	       : S_ISCHR(mode)  ? "a character device"
	       : S_ISBLK(mode)  ? "a block device"
	                        : "of an unknown type";
}

/* Adds f to its directory's current pack (*pack), or to a new one when it would not fit. */
static int plan_pack(struct walk *w, struct pub_pack **pack, struct pub_entry *f)
{
	struct pub_tree *t = w->tree;
	struct pub_pack *p = *pack;

	if (!p || p->planned + f->size > w->o->pack_max) {
		p = calloc(1, sizeof(*p));
		if (!p || push((void ***)&t->packs, &t->n_packs, &t->cap_packs, p) != 0) {
			free(p);
			return -ENOMEM;
		}
		*pack = p;
	}
	if (push((void ***)&p->members, &p->n_members, &p->cap_members, f) != 0)
		return -ENOMEM;
	p->planned += f->size;
	f->pack = p;
	return 0;
}

static char *join(const char *dir, const char *name)
{
	char *s = NULL;

	if (asprintf(&s, "%s%s%s", dir, *dir ? "/" : "", name) < 0)
		return NULL;
	return s;
}

/* Records one name of directory rel (open at dfd). */
static int add_child(struct walk *w, int dfd, const char *rel, const char *name,
                     struct pub_pack **pack)
{
	struct pub_tree *t = w->tree;
	struct pub_entry *e = NULL;
	char *path = join(rel, name);
	struct stat sb;
	int rc = 0;

	if (!path)
		return -ENOMEM;
	if (!is_utf8((const unsigned char *)name, strlen(name))) {
		pub_say("", w->src, path,
		        "the name is not UTF-8, which a manifest cannot hold; rename it", true);
		rc = -EILSEQ;
		goto out;
	}
	const char *why = *rel ? index_check_segment(name, strlen(name))
	                       : index_check_root_segment(name, strlen(name));
	if (why && !*rel && strcmp(name, INDEX_RESERVED_ROOT_NAME) == 0) {
		pub_say("warning: ", w->src, path,
		        "skipped: the mount shows its own status directory under this name", false);
		goto out;
	}
	if (why) {
		pub_say("", w->src, path, why, false);
		rc = -EINVAL;
		goto out;
	}
	if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
		rc = -errno;
		pub_say("", w->src, path, strerror(-rc), false);
		goto out;
	}
	if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode)) {
		char why_skip[64];
		snprintf(why_skip, sizeof(why_skip), "skipped: %s", skipped_kind(sb.st_mode));
		pub_say("warning: ", w->src, path, why_skip, false);
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		rc = -ENOMEM;
		goto out;
	}
	e->path = path;
	path = NULL;
	e->mode = sb.st_mode & 0777;
	e->mtime = (int64_t)sb.st_mtim.tv_sec;
	e->dev = sb.st_dev;
	e->ino = sb.st_ino;
	e->kind = S_ISDIR(sb.st_mode) ? PUB_DIR : S_ISLNK(sb.st_mode) ? PUB_SYMLINK : PUB_FILE;
	if (push((void ***)&t->entries, &t->n_entries, &t->cap_entries, e) != 0) {
		free(e->path);
		free(e);
		rc = -ENOMEM;
		goto out;
	}
	if (e->kind == PUB_SYMLINK) {
		char target[PUB_TARGET_MAX + 2];
		ssize_t n = readlinkat(dfd, name, target, sizeof(target));
		if (n < 0) {
			rc = -errno;
			pub_say("", w->src, e->path, strerror(-rc), false);
		} else if (n == 0 || n > PUB_TARGET_MAX) {
			pub_say("", w->src, e->path, "a symlink target of 0 or over 4095 bytes",
			        false);
			rc = -EINVAL;
		} else if (!is_utf8((const unsigned char *)target, (size_t)n)) {
			pub_say("", w->src, e->path,
			        "the symlink's target is not UTF-8, which a manifest"
			        " cannot hold",
			        false);
			rc = -EILSEQ;
		} else if (!(e->target = strndup(target, (size_t)n))) {
			rc = -ENOMEM;
		}
	} else if (e->kind == PUB_FILE) {
		e->size = (uint64_t)sb.st_size;
		if (e->size > 0 && e->size < w->o->pack_under)
			rc = plan_pack(w, pack, e);
	}
out:
	free(path);
	return rc;
}

/* Lists directory rel (of the source; seen: its entry, NULL for the top) into the tree:
 * its entries, and its packs. */
static int list_dir(struct walk *w, const char *rel, const struct pub_entry *seen)
{
	char **names = NULL;
	struct pub_pack *pack = NULL;
	struct stat sb;
	size_t n = 0;
	DIR *dir = NULL;
	int fd, rc = 0;

	fd = pub_open_beneath(w->src_fd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		pub_say("", w->src, rel, pub_beneath_why(fd), false);
		return fd;
	}
	if (fstat(fd, &sb) != 0 || !(dir = fdopendir(fd))) {
		rc = -errno;
		close(fd);
		pub_say("", w->src, rel, strerror(-rc), false);
		goto out;
	}
	/* Its parent listed this name as a directory: one renamed into its place since would
	 * be listed as if it were it. */
	if (seen && (sb.st_dev != seen->dev || sb.st_ino != seen->ino)) {
		rc = -ESTALE;
		pub_say("", w->src, rel,
		        "is not the directory the walk saw (replaced while it was published)",
		        false);
		goto out;
	}
	rc = read_names(dir, &names, &n);
	if (rc) {
		pub_say("", w->src, rel, strerror(-rc), false);
		goto out;
	}
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = add_child(w, dirfd(dir), rel, names[i], &pack);
out:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (dir)
		closedir(dir);
	return rc;
}

/* A pack of one file saves no request: that file is an object of its own instead. */
static void drop_lone_packs(struct pub_tree *t)
{
	size_t kept = 0;

	for (size_t i = 0; i < t->n_packs; i++) {
		struct pub_pack *p = t->packs[i];
		if (p->n_members > 1) {
			t->packs[kept++] = p;
			continue;
		}
		p->members[0]->pack = NULL;
		free(p->members);
		free(p);
	}
	t->n_packs = kept;
}

int pub_walk(int src_fd, const char *src, const struct publish_options *o, struct pub_tree *tree)
{
	struct walk w = {.src_fd = src_fd, .src = src, .o = o, .tree = tree};
	int rc;

	memset(tree, 0, sizeof(*tree));
	/* The entries are the queue: each directory is listed once it is reached (listing
	 * moves the array, never an entry). */
	rc = list_dir(&w, "", NULL);
	for (size_t i = 0; i < tree->n_entries && rc == 0; i++)
		if (tree->entries[i]->kind == PUB_DIR)
			rc = list_dir(&w, tree->entries[i]->path, tree->entries[i]);
	if (rc == 0)
		drop_lone_packs(tree);
	if (rc == 0 && tree->n_entries)
		qsort(tree->entries, tree->n_entries, sizeof(*tree->entries), cmp_entries);
	if (rc == 0 && tree->n_packs)
		qsort(tree->packs, tree->n_packs, sizeof(*tree->packs), cmp_packs);
	return rc;
}

void pub_tree_free(struct pub_tree *tree)
{
	for (size_t i = 0; i < tree->n_entries; i++) {
		free(tree->entries[i]->path);
		free(tree->entries[i]->target);
		pub_chunker_free(&tree->entries[i]->chunks);
		pub_stored_free(&tree->entries[i]->stored);
		free(tree->entries[i]);
	}
	for (size_t i = 0; i < tree->n_packs; i++) {
		free(tree->packs[i]->members);
		pub_stored_free(&tree->packs[i]->stored);
		free(tree->packs[i]);
	}
	free(tree->entries);
	free(tree->packs);
	pub_read_orders_free(tree);
	memset(tree, 0, sizeof(*tree));
}
