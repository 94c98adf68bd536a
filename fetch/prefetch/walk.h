/*
 * Walk detection and its plan: which files a reader that walks a tree will open next.
 *
 * A walk is seen when WALK_MIN_OPENS files of one directory are opened one after another
 * (in listing order or not). Its plan is the order a depth-first walk continues in: the rest
 * of that directory's files, then its subdirectories (each one's files, then its own
 * subdirectories), then the directories after it in its parent, and so up to the root, all
 * in listing order. The walk keeps a window of files speculated ahead of its reader: it
 * starts at WALK_START_FILES and doubles with every open the window predicted, up to
 * walk_config.ahead_files and window_bytes. WALK_MAX_MISSES opens in a row that it did not
 * predict (and not in the directory of the open before) end it: the pattern stopped.
 *
 * No locks: one thread (prefetch.c's) owns a struct walk. It reads the namespace through the
 * index, which has its own lock.
 */
#ifndef SPOOLFS_FETCH_PREFETCH_WALK_H
#define SPOOLFS_FETCH_PREFETCH_WALK_H

#include <stdbool.h>
#include <stdint.h>

struct index;

#define WALK_MIN_OPENS 3
#define WALK_START_FILES 8
#define WALK_MAX_MISSES 3
/* The window's bytes grow with its files: at most this much per file in it. */
#define WALK_BYTES_PER_FILE (256u << 10)
#define WALK_MAX_DEPTH 64
/* Opens remembered so that the plan does not count them in its window. */
#define WALK_RECENT 16
/* walk_fill's max, at most. */
#define WALK_FILL_MAX 256

struct walk_config {
	unsigned ahead_files;  /* files speculated ahead of the reader, at most */
	uint64_t window_bytes; /* their bytes, at most */
	uint64_t max_object;   /* larger files are left to their readers */
	/* Makes sure directory dir is listed (lazy sources); NULL: always listed. */
	int (*ensure_listed)(void *ctx, uint64_t dir);
	void *ctx;
};

/* One file the plan says comes next. */
struct walk_item {
	uint64_t ino;
	uint64_t size;
	unsigned order; /* its place in the plan's batch (walk_fill's sort keeps it) */
};

struct walk_frame {
	uint64_t dir;
	uint64_t cookie; /* where its listing resumes */
	bool dirs_pass;  /* files listed; now its subdirectories */
};

struct walk {
	struct index *idx;
	struct walk_config cfg;
	/* Detection: the run of opens in one directory. */
	uint64_t last_dir;
	uint64_t last_ino;
	unsigned run;
	unsigned run_hits; /* opens of the run the window predicted */
	/* The last opens, which the plan passes over: the walk's own first files among them. */
	uint64_t recent[WALK_RECENT];
	unsigned n_recent;
	/* The walk, when active. */
	bool active;
	uint64_t dir;            /* where it was seen */
	unsigned misses;         /* opens in a row it did not predict */
	unsigned target;         /* files to keep ahead */
	bool exhausted;          /* the plan has nothing more */
	struct walk_item *ahead; /* speculated, not opened yet */
	unsigned n_ahead, cap_ahead;
	uint64_t ahead_bytes;
	/* Taken from the plan but not into the window (it was full): first next time. */
	struct walk_item pending[WALK_FILL_MAX];
	unsigned n_pending;
	/* The plan's cursor: a depth-first stack; ascend is the directory whose parent
	 * continues once the stack is empty (0: none, at the root). */
	struct walk_frame stack[WALK_MAX_DEPTH];
	unsigned depth;
	uint64_t ascend;
	/* Counters for stats. */
	uint64_t walks_seen;
	uint64_t hits;
};

void walk_init(struct walk *w, struct index *idx, const struct walk_config *cfg);
void walk_free(struct walk *w);

/*
 * Notes an open of file ino in directory dir. Returns 1 when a walk starts or goes on
 * (walk_fill may have room), 0 otherwise (also when a walk ended).
 */
int walk_note_open(struct walk *w, uint64_t ino, uint64_t dir);

/*
 * The next files to speculate: up to max of them in out, smallest first (by size class:
 * within a factor of 16, in the plan's order), taken from the
 * plan in order as far as the window has room (files and bytes) for. Returns how many, or
 * -errno. Each one returned is counted in the window: walk_unfill one that was not started
 * after all.
 */
int walk_fill(struct walk *w, struct walk_item *out, unsigned max);

/* Takes an item back out of the window (its object was local or downloading already). */
void walk_unfill(struct walk *w, uint64_t ino);

#endif
