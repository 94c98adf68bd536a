/*
 * A manifest's entry array read in one streaming pass (manifest_entries.c): each entry's
 * fields are gathered and handed over one entry at a time, so a large manifest is read
 * without a tree of it in memory. Knows the field names and JSON types; what an entry's
 * fields must be is the loader's (manifest_load.c).
 */
#ifndef SPOOLFS_FETCH_SOURCE_MANIFEST_ENTRIES_H
#define SPOOLFS_FETCH_SOURCE_MANIFEST_ENTRIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The fields of an entry that mean something; other keys are ignored. Version 1 reads the
 * first F_V1_COUNT only. */
enum field_id {
	F_PATH,
	F_SIZE,
	F_SHA256,
	F_URL,
	F_MTIME,
	F_EXECUTABLE,
	F_ETAG,
	F_V1_COUNT,
	F_TYPE = F_V1_COUNT,
	F_MODE,
	F_TARGET,
	F_PACK,
	F_OFFSET,
	F_CHUNKS,
	F_MANIFEST,
	F_STORED, /* version 3; read in any version, to refuse it in the others */
	F_COUNT
};

extern const char *const manifest_field_names[F_COUNT];

/* A JSON value's type, as sqlite's json_type names them. */
enum manifest_json_type {
	J_NONE,
	J_NULL,
	J_TRUE,
	J_FALSE,
	J_INTEGER,
	J_REAL,
	J_TEXT,
	J_ARRAY,
	J_OBJECT
};

/* One field of an entry. */
struct manifest_field {
	bool seen;
	enum manifest_json_type type;
	bool is_int64; /* an integer that fits in int64_t (larger ones are integers all the same) */
	int64_t i;
	bool has_nul; /* a text that decodes to one with a NUL byte in it ("\u0000") */
	/* NUL-terminated: a text field decoded, an object field as its JSON text (read again
	 * with sqlite by the loader). Owned by the walk; valid during the callback. */
	char *text;
	size_t len, cap;
};

struct manifest_entry {
	int64_t i; /* its place in the array, from 0 */
	bool is_object;
	/* The first of duplicate keys counts, as with json_extract. */
	struct manifest_field f[F_COUNT];
};

/* Called for each entry in order: 0 goes on, -errno ends the walk with that value. */
typedef int (*manifest_entry_fn)(void *ctx, const struct manifest_entry *e);

/*
 * Walks the top-level array named array ("files" or "entries": the first key spelled so,
 * without escapes, as sqlite's path lookup finds it) of the JSON object json[0..len),
 * calling fn for each element. The caller checked the text is an object with such an
 * array. 0; fn's -errno; -EINVAL with the reason in err ("manifest is not valid JSON: ...")
 * for half a surrogate pair in a string escape, which the two parsers would decode
 * differently, or a text the parser refuses after all; -ENOMEM.
 */
int manifest_entries_walk(const char *json, size_t len, const char *array, manifest_entry_fn fn,
                          void *ctx, char *err, size_t err_len);

#endif
