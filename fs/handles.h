/*
 * Open files (handles.c) and the objects they read (passthrough.c keeps those).
 */
#ifndef SPOOLFS_FS_HANDLES_H
#define SPOOLFS_FS_HANDLES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "fetch/engine/flight.h"
#include "fetch/engine/object.h"

/*
 * What fs/ keeps of one object (a flight) while handles of it are open: how the kernel
 * reads them (passthrough.c). In fs_session.pt.objects, by the flight's id, from the first
 * open to the last release; guarded, like the table, by fs_session.pt.lock. fs/'s
 * own (fetch/ never sees it), and all of it in this one structure, so that a process taking
 * over the mount (DESIGN.md, promise 6) has one thing to rebuild.
 */
struct fs_object { /* every field guarded by fs_session.pt.lock */
	uint64_t flight_id;
	int pt_backing_id;   /* the spool registered as a passthrough backing file, 0 = none */
	unsigned pt_handles; /* handles the kernel reads from the spool itself */
	unsigned pt_cached_handles; /* handles read through FUSE's page cache */
	struct fs_object *next;     /* in its bucket of fs_session.pt.objects */
};
#define FS_OBJECT_BUCKETS 256

/* An open file: an object's flight, or a snapshot of a virtual file. */
struct fs_handle {
	struct flight *flight; /* a reference; NULL for a virtual file */
	/* A pack member's handle reads its pack's flight through this view (member.c); both
	 * fixed at open. */
	bool is_member;
	struct fetch_member member;
	atomic_bool member_verified; /* this handle saw the member's bytes match */
	bool member_counted;         /* counted open in fs_session.pushes (member_push.c) */
	/* Its flight's entry in fs_session.pt.objects, set by fs_passthrough_open; guarded by
	 * pt.lock. NULL for a virtual file, or once released. */
	struct fs_object *object;
	char *text; /* virtual file content */
	size_t len;
	/*
	 * The kernel sends release only after every read of the file was answered, but a
	 * sanitizer cannot see that ordering: reads release-increment this once they are done
	 * with the handle, and release acquire-loads it before freeing, which states it.
	 */
	atomic_uint reads_done;
	uint64_t opened_ns;           /* util_monotonic_ns() at the open, for first_byte */
	atomic_bool first_read_taken; /* a read of it has claimed the first_byte observation */
	bool passthrough;             /* the kernel reads the spool itself; guarded by pt.lock */
	/* Its fh (handles.c), set by fs_handle_track or fs_handle_adopt and fixed after. */
	uint64_t id;
	uint64_t ino;    /* the inode it opens; fixed at open */
	uint64_t parent; /* its directory, as fetch_object_open read it: for walk prefetch */
	/* A passthrough open of an inode an earlier serving process left open passthrough:
	 * the kernel's backing id is that process's (fs_passthrough_inherited). No flight. */
	bool inherited_passthrough;
	/* In fs_session.handles.open and by_id; guarded by fs_session.handles.lock. */
	struct fs_handle *prev;
	struct fs_handle *next;
	struct fs_handle *id_next;
	/* This handle's sequential run (page_drop.c); guarded by pt.lock. */
	uint64_t run_start;  /* where the run began */
	uint64_t run_end;    /* the furthest read request's end in it */
	uint64_t dropped_to; /* the kernel's cached pages of the run below it are dropped */
};

/* Buckets of the open-handle table (handles.c). */
#define FS_HANDLE_BUCKETS 1024

struct fs_session;
/* Gives a new handle its fh (returned; h->passthrough decided before) and links it into
 * the session's tables; fs_handle_free unlinks and frees it (its flight reference or its
 * snapshot). */
/* h's fh, chosen now if it has none yet (fs_handle_track keeps it): the passthrough
 * ledger records an open by its fh before the reply. */
uint64_t fs_handle_assign_id(struct fs_session *s, struct fs_handle *h);
uint64_t fs_handle_track(struct fs_session *s, struct fs_handle *h);
void fs_handle_free(struct fs_session *s, struct fs_handle *h);
/* The handle with fh, or NULL: none of this process's (an earlier serving process opened
 * it, or it was released). The kernel sends RELEASE only after every other request of the
 * file was answered, so the handle stays valid for the request that found it. */
struct fs_handle *fs_handle_find(struct fs_session *s, uint64_t fh);
/* Links h, rebuilt for an earlier process's fh, under that fh; when another thread adopted
 * one first, frees h and returns that one. Counts the handles linked (handles_adopted). */
struct fs_handle *fs_handle_adopt(struct fs_session *s, struct fs_handle *h, uint64_t fh);
/* Bit 63 of an fh: a passthrough open (the kernel reads it itself; only RELEASE comes). */
#define FS_FH_PASSTHROUGH (1ULL << 63)
/* After the FUSE loop and every thread that reads handles have stopped. */
void fs_handles_free_all(struct fs_session *s);

/* The open's time, for the first read of handle h (fs_counters.first_byte); 0 for the
 * others. Call before the handle's reads_done goes up. */
uint64_t fs_handle_first_read_ns(struct fs_handle *h);

#endif
