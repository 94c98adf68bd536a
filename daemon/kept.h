/*
 * A kept mount's namespace (--cache-dir DIR --keep-cache, doc/cache-dir.md "Kept
 * namespaces"): whether a mount starts from the copy of the namespace that a mount of the
 * same manifest loaded before, instead of loading the manifest again, and keeps a copy for
 * the next. This file decides and says so; the copy is index/copy.h's, its file
 * fetch/cache/kept.h's, its name fetch/source/kept_key.h's.
 *
 * Start-up only, on the daemon's main thread (load_manifest in main.c), before the mount
 * exists: nothing here is shared. Nothing here fails a mount: a copy that cannot be used or
 * kept costs the load it would have saved, and a line says why.
 */
#ifndef SPOOLFS_DAEMON_KEPT_H
#define SPOOLFS_DAEMON_KEPT_H

#include <stdbool.h>

#include "fetch/source/kept_key.h"

struct fs_session;

struct daemon_kept {
	bool on; /* this mount uses and keeps copies */
	char key[UTIL_SHA256_HEX_LEN];
	char manifest_sha256[UTIL_SHA256_HEX_LEN];
};

/*
 * Whether this mount uses kept namespaces, and under which key: a generation-0 mount with
 * --cache-dir and --keep-cache, of a manifest that has a time of its own (in->mtime > 0).
 * Entries without an mtime show the manifest's time; without one they show the mount's,
 * which a copy made at another mount would not: such a manifest is loaded every time.
 */
void daemon_kept_prepare(struct fs_session *s, const struct source_kept_inputs *in,
                         struct daemon_kept *k);

/*
 * Fills s->idx (fresh, nothing loaded) from the kept copy: 1 when it did (one line says so),
 * 0 when there is none to use (a damaged one removed, said): load the manifest as usual;
 * -ENOMEM when it filled the namespace and then could not finish (the mount fails, as a
 * load out of memory would).
 */
int daemon_kept_restore(struct fs_session *s, const struct daemon_kept *k);

/* After the load filled s->idx: keeps a copy of it for the next mount (without the
 * session's own meta: index/copy.h). */
void daemon_kept_save(struct fs_session *s, const struct daemon_kept *k);

#endif
