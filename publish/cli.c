/* `spoolfs publish`'s command line: options, their checks, the usage text. */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/source/read_orders.h"
#include "publish/publish_i.h"
#include "util/size.h"

#define DEFAULT_PACK_UNDER (64u << 10)
#define DEFAULT_PACK_MAX (4u << 20)
#define MAX_JOBS 256
/* About 6 MB of manifest: a nested one loads in well under a second at its first lookup,
 * and a tree of a million files mounts with a top manifest of at most this many. */
#define DEFAULT_NEST_OVER 50000
/* The mount's sparse unit: a random 4 KiB read moves one chunk (doc/manifest.md). Files
 * of a few chunks gain little: their whole hash is checked as fast. */
#define DEFAULT_CHUNK_SIZE (256u << 10)
#define DEFAULT_CHUNK_OVER (1u << 20)
/* Chosen by measurement on dist-packages (doc/benchmarks.md, "Publish: compression"). */
#define DEFAULT_COMPRESS_LEVEL 6
#define MAX_COMPRESS_LEVEL 19
#define DEFAULT_MIN_SAVING 10

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: spoolfs publish SRC_DIR OUT_DIR [--manifest NAME] [--pack-under SIZE]\n"
	       "                       [--pack-max SIZE] [--nest-over N] [--chunk-over SIZE]\n"
	       "                       [--chunk-size SIZE] [--verify-existing] [-j N]\n"
	       "                       [--read-order [NAME=]FILE]... [--tag NAME]...\n"
	       "                       [--compress-level N] [--compress-min-saving PERCENT]\n"
	       "                       [--no-compress]\n"
	       "\n"
	       "Writes OUT_DIR/manifest.json (version 3; 2 with --no-compress) and every object\n"
	       "it names, content-addressed under OUT_DIR/objects, so that serving OUT_DIR over\n"
	       "HTTP (or syncing it to a bucket) and mounting its manifest shows SRC_DIR. Objects\n"
	       "already in OUT_DIR are not written again; the manifest is written last. Upload it\n"
	       "last.\n"
	       "\n"
	       "options:\n"
	       "  --manifest NAME     the manifest's file name in OUT_DIR (default\n"
	       "                      manifest.json); releases may share one OUT_DIR\n"
	       "  --pack-under SIZE   pack files smaller than SIZE (default 64K; 0: no packs)\n"
	       "  --pack-max SIZE     the most bytes in one pack (default 4M)\n"
	       "  --nest-over N       a directory with more than N entries below it gets a\n"
	       "                      manifest of its own, loaded at its first lookup\n"
	       "                      (default 50000; 0: one manifest)\n"
	       "  --chunk-over SIZE   a file over SIZE gets a chunk hash list, so a mount\n"
	       "                      verifies each chunk before serving it (default 1M; 0:\n"
	       "                      none)\n"
	       "  --chunk-size SIZE   the chunks' size (default 256K; a power of two)\n"
	       "  --read-order [NAME=]FILE  a --record-reads file of a job's run: its paths,\n"
	       "                      in first-read order, go into the manifest as the read\n"
	       "                      order NAME (default: default) that mounts fetch ahead;\n"
	       "                      repeatable, files of one name are merged by rank\n"
	       "  --tag NAME          after the manifest, write a pointer NAME beside it naming\n"
	       "                      the manifest by sha256 (mount .../NAME for that release);\n"
	       "                      moved by the next publish with the same --tag\n"
	       "  --verify-existing   re-hash each object already in OUT_DIR before keeping it\n"
	       "                      (without: it is kept when its size is right); a wrong\n"
	       "                      one is replaced\n"
	       "  --compress-level N  zstd level of the objects, 1 to 19 (default 6)\n"
	       "  --compress-min-saving PERCENT  an object that does not shrink by PERCENT\n"
	       "                      (0 to 99, default 10) is stored as it is\n"
	       "  --no-compress       store every object as it is (manifest version 2)\n"
	       "  -j, --jobs N        hash and copy N files at once (default: the CPUs)\n"
	       "  -h, --help          print this and exit\n"
	       "\n"
	       "OUT_DIR may be s3://BUCKET[/PREFIX]: objects the store lacks are uploaded,\n"
	       "then the manifest (doc/publish.md). With it: --endpoint URL, --region R,\n"
	       "--profile NAME, --role-arn ARN, --path-style (as for a mount), --if-absent\n"
	       "(never overwrite the manifest), --dry-run, --uploads N (PUTs at once, 8),\n"
	       "--part-size SIZE (larger objects go up in parts of SIZE, 8M)\n");
}

static unsigned cpus(void)
{
	cpu_set_t set;
	int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;

	return n < 1 ? 1 : n > MAX_JOBS ? MAX_JOBS : (unsigned)n;
}

/* --read-order [NAME=]FILE into orders (room for argc of them). 0, or an exit status. */
static int add_read_order(struct publish_options *o, struct publish_read_order *orders, char *arg)
{
	char *eq = strchr(arg, '=');
	struct publish_read_order *r = &orders[o->n_read_orders];
	size_t names = 0;

	*r = (struct publish_read_order){.name = READ_ORDER_DEFAULT, .file = arg};
	/* A FILE's own '=' is kept when what goes before it is no name (e.g. "./a=b"). */
	if (eq && source_read_order_name_ok(arg, (size_t)(eq - arg))) {
		*eq = '\0';
		r->name = arg;
		r->file = eq + 1;
	} else if (eq && !memchr(arg, '/', (size_t)(eq - arg))) {
		fprintf(stderr,
		        "spoolfs publish: --read-order NAME=FILE: a NAME is 1 to %d of A-Z a-z 0-9"
		        " . _ -\n",
		        READ_ORDER_NAME_MAX);
		return 2;
	}
	if (!r->file[0]) {
		fprintf(stderr, "spoolfs publish: --read-order %s=: no FILE\n", r->name);
		return 2;
	}
	/* Distinct names, this one's included: no more than a mount accepts. */
	for (size_t i = 0; i <= o->n_read_orders; i++) {
		bool first = true;
		for (size_t k = 0; k < i; k++)
			first &= strcmp(orders[k].name, orders[i].name) != 0;
		names += first;
	}
	if (names > READ_ORDERS_MAX) {
		fprintf(stderr, "spoolfs publish: --read-order: more than %d names\n",
		        READ_ORDERS_MAX);
		return 2;
	}
	o->n_read_orders++;
	return 0;
}

/* A plain file name in OUT_DIR: not objects/, not a temporary file's dot name. */
static bool good_manifest_name(const char *name)
{
	return name[0] && name[0] != '.' && !strchr(name, '/') && strcmp(name, "objects") != 0 &&
	       strlen(name) <= 200;
}

/* The command line, with room in orders for a --read-order per argument. */
static int parse_and_run(int argc, char **argv, struct publish_read_order *orders)
{
	static const struct option own[] = {
	    {"manifest", required_argument, NULL, 'm'},
	    {"pack-under", required_argument, NULL, 'u'},
	    {"pack-max", required_argument, NULL, 'x'},
	    {"jobs", required_argument, NULL, 'j'},
	    {"nest-over", required_argument, NULL, 'n'},
	    {"chunk-over", required_argument, NULL, 'c'},
	    {"chunk-size", required_argument, NULL, 's'},
	    {"verify-existing", no_argument, NULL, 'V'},
	    {"read-order", required_argument, NULL, 'O'},
	    {"tag", required_argument, NULL, 'T'},
	    {"compress-level", required_argument, NULL, 'L'},
	    {"compress-min-saving", required_argument, NULL, 'M'},
	    {"no-compress", no_argument, NULL, 'N'},
	    {"help", no_argument, NULL, 'h'},
	    /* OUT_DIR s3://BUCKET[/PREFIX] (publish/s3.c); the mount's store options follow. */
	    {"if-absent", no_argument, NULL, 'I'},
	    {"dry-run", no_argument, NULL, 'D'},
	    {"uploads", required_argument, NULL, 'U'},
	    {"part-size", required_argument, NULL, 'Z'},
	};
	struct option longs[sizeof(own) / sizeof(own[0]) + PUB_S3_STORE_OPTIONS + 1];
	struct publish_options o = {
	    .manifest = "manifest.json",
	    .pack_under = DEFAULT_PACK_UNDER,
	    .pack_max = DEFAULT_PACK_MAX,
	    .jobs = cpus(),
	    .nest_over = DEFAULT_NEST_OVER,
	    .chunk_over = DEFAULT_CHUNK_OVER,
	    .chunk_size = DEFAULT_CHUNK_SIZE,
	    .compress = {.level = DEFAULT_COMPRESS_LEVEL, .min_saving = DEFAULT_MIN_SAVING}};
	bool level_given = false, no_compress = false;
	unsigned long jobs, n;
	char *end;
	int c, rc;

	pub_s3_longs(own, sizeof(own) / sizeof(own[0]), longs);
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "j:h", longs, NULL)) != -1) {
		switch (c) {
		case 'm':
			o.manifest = optarg;
			if (!good_manifest_name(o.manifest)) {
				fprintf(stderr,
				        "spoolfs publish: --manifest takes a file name in"
				        " OUT_DIR (no '/', no leading '.', not \"objects\")\n");
				return 2;
			}
			break;
		case 'u':
		case 'x':
			if (util_parse_size(optarg, c == 'u' ? &o.pack_under : &o.pack_max) != 0) {
				fprintf(stderr, "spoolfs publish: bad %s '%s' (e.g. 64K, 4M)\n",
				        c == 'u' ? "--pack-under" : "--pack-max", optarg);
				return 2;
			}
			break;
		case 'j':
			jobs = strtoul(optarg, &end, 10);
			if (optarg[0] < '0' || optarg[0] > '9' || *end || jobs < 1 ||
			    jobs > MAX_JOBS) {
				fprintf(stderr, "spoolfs publish: -j takes 1 to %d\n", MAX_JOBS);
				return 2;
			}
			o.jobs = (unsigned)jobs;
			break;
		case 'c':
		case 's':
			if (util_parse_size(optarg, c == 'c' ? &o.chunk_over : &o.chunk_size) !=
			    0) {
				fprintf(stderr, "spoolfs publish: bad %s '%s' (e.g. 1M, 256K)\n",
				        c == 'c' ? "--chunk-over" : "--chunk-size", optarg);
				return 2;
			}
			break;
		case 'n':
			o.nest_over = strtoull(optarg, &end, 10);
			if (optarg[0] < '0' || optarg[0] > '9' || *end) {
				fprintf(stderr,
				        "spoolfs publish: --nest-over takes a count of entries"
				        " (0: no nested manifests)\n");
				return 2;
			}
			break;
		case 'V':
			o.verify_existing = true;
			break;
		case 'L':
		case 'M':
			n = strtoul(optarg, &end, 10);
			if (optarg[0] < '0' || optarg[0] > '9' || *end ||
			    (c == 'L' ? n < 1 || n > MAX_COMPRESS_LEVEL : n > 99)) {
				fprintf(stderr,
				        c == 'L'
				            ? "spoolfs publish: --compress-level takes 1 to %d\n"
				            : "spoolfs publish: --compress-min-saving takes a"
				              " percent, 0 to 99\n",
				        MAX_COMPRESS_LEVEL);
				return 2;
			}
			if (c == 'L') {
				o.compress.level = (int)n;
				level_given = true;
			} else {
				o.compress.min_saving = (unsigned)n;
			}
			break;
		case 'N':
			no_compress = true;
			break;
		case 'O':
			rc = add_read_order(&o, orders, optarg);
			if (rc)
				return rc;
			break;
		case 'T':
			if (pub_tag_option(&o, optarg) != 0)
				return 2;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'E':
		case 'R':
		case 'P':
		case 'A':
		case 'S':
		case 'I':
		case 'D':
		case 'U':
		case 'Z':
			if (pub_s3_option(&o.s3, c, optarg) != 0)
				return 2;
			break;
		default:
			fprintf(stderr, "spoolfs publish: bad option '%s'\n", argv[optind - 1]);
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	if (o.chunk_size < 4096 || o.chunk_size > (64u << 20) ||
	    (o.chunk_size & (o.chunk_size - 1))) {
		fprintf(stderr, "spoolfs publish: --chunk-size must be a power of two from 4K to"
		                " 64M\n");
		return 2;
	}
	if (no_compress && level_given) {
		fprintf(stderr, "spoolfs publish: --no-compress and --compress-level: give one\n");
		return 2;
	}
	if (no_compress)
		o.compress.level = 0;
	if (pub_tag_check_manifest(&o) != 0)
		return 2;
	if (o.pack_under > o.pack_max) {
		fprintf(stderr, "spoolfs publish: --pack-under must not exceed --pack-max\n");
		return 2;
	}
	o.read_orders = orders;
	o.src = argv[optind];
	o.out = argv[optind + 1];
	return publish_run(&o) == 0 ? 0 : 1;
}

int publish_main(int argc, char **argv)
{
	struct publish_read_order *orders = calloc((size_t)argc + 1, sizeof(*orders));
	int rc;

	if (!orders) {
		fprintf(stderr, "spoolfs publish: %s\n", strerror(ENOMEM));
		return 1;
	}
	rc = parse_and_run(argc, argv, orders);
	free(orders);
	return rc;
}
