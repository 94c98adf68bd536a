/*
 * Reading back the spool records a previous session left in a persistent cache directory
 * (index_record_ranges / index_record_sealed write them). Ranges are recorded only
 * after their bytes were made durable, so what this returns may be served without a
 * request.
 *
 * Lock: idx->spool_lock, as for every spool statement (see index_i.h). The statements are prepared
 * per call: this runs once per object per session, not per read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/index_i.h"
#include "index/ranges.h"

int index_spool_lookup(struct index *idx, const char *key, bool *complete,
                       struct index_ranges *ranges)
{
	sqlite3_stmt *obj = NULL, *rng = NULL;
	int rc;

	index_ranges_clear(ranges);
	pthread_mutex_lock(&idx->spool_lock);
	rc = index_sqlite_errno(sqlite3_prepare_v2(
	    idx->spool_db, "SELECT complete FROM spool_object WHERE key = :key", -1, &obj, NULL));
	if (rc == 0)
		rc = index_sqlite_errno(
		    sqlite3_prepare_v2(idx->spool_db,
		                       "SELECT off_start, off_end FROM spool_range WHERE key = "
		                       ":key ORDER BY off_start",
		                       -1, &rng, NULL));
	if (rc == 0)
		rc = index_bind_text(obj, ":key", key, -1);
	if (rc)
		goto out;
	rc = sqlite3_step(obj);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -ENOENT : index_step_errno(rc);
		goto out;
	}
	*complete = sqlite3_column_int(obj, 0) != 0;
	rc = index_bind_text(rng, ":key", key, -1);
	while (rc == 0 && (rc = sqlite3_step(rng)) == SQLITE_ROW) {
		int64_t start = sqlite3_column_int64(rng, 0), end = sqlite3_column_int64(rng, 1);
		rc = start >= 0 && end >= start
		         ? index_ranges_add(ranges, (uint64_t)start, (uint64_t)end)
		         : -EINVAL;
	}
	if (rc == SQLITE_DONE)
		rc = 0;
	else if (rc > 0)
		rc = index_step_errno(rc);
out:
	sqlite3_finalize(obj);
	sqlite3_finalize(rng);
	pthread_mutex_unlock(&idx->spool_lock);
	return rc;
}

int index_spool_touch(struct index *idx, const char *key, uint64_t size, int64_t now)
{
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&idx->spool_lock);
	rc = index_sqlite_errno(sqlite3_prepare_v2(
	    idx->spool_db,
	    "INSERT INTO spool_object(key, complete, size, last_used) VALUES(:key, 0, :size, :now)"
	    " ON CONFLICT(key) DO UPDATE SET size = :size, last_used = :now",
	    -1, &st, NULL));
	if (rc == 0)
		rc = index_bind_text(st, ":key", key, -1);
	if (rc == 0)
		rc = index_bind_int64(st, ":size", (int64_t)size);
	if (rc == 0)
		rc = index_bind_int64(st, ":now", now);
	if (rc == 0)
		rc = index_step_done(st);
	sqlite3_finalize(st);
	pthread_mutex_unlock(&idx->spool_lock);
	return rc;
}

int index_spool_usage(struct index *idx, uint64_t *bytes, struct index_spool_entry *lru, size_t max,
                      size_t *n)
{
	sqlite3_stmt *sum = NULL, *old = NULL;
	int rc;

	*bytes = 0;
	*n = 0;
	pthread_mutex_lock(&idx->spool_lock);
	rc = index_sqlite_errno(sqlite3_prepare_v2(
	    idx->spool_db, "SELECT coalesce(sum(size), 0) FROM spool_object", -1, &sum, NULL));
	if (rc == 0)
		rc = index_sqlite_errno(sqlite3_prepare_v2(idx->spool_db,
		                                           "SELECT key, size FROM spool_object"
		                                           " ORDER BY last_used, key LIMIT :max",
		                                           -1, &old, NULL));
	if (rc == 0)
		rc = index_bind_int64(old, ":max", (int64_t)max);
	if (rc)
		goto out;
	if (sqlite3_step(sum) == SQLITE_ROW)
		*bytes = (uint64_t)sqlite3_column_int64(sum, 0);
	while ((rc = sqlite3_step(old)) == SQLITE_ROW && *n < max) {
		const unsigned char *key = sqlite3_column_text(old, 0);
		lru[*n].key = strdup(key ? (const char *)key : "");
		lru[*n].size = (uint64_t)sqlite3_column_int64(old, 1);
		if (!lru[*n].key) {
			rc = -ENOMEM;
			break;
		}
		(*n)++;
	}
	rc = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : rc < 0 ? rc : index_step_errno(rc);
out:
	sqlite3_finalize(sum);
	sqlite3_finalize(old);
	pthread_mutex_unlock(&idx->spool_lock);
	return rc;
}

int index_spool_reset(struct index *idx, const char *key)
{
	return index_spool_change(idx, idx->st_obj_reset, key, true);
}

int index_record_incomplete(struct index *idx, const char *key)
{
	return index_spool_change(idx, idx->st_obj_reset, key, false);
}

int index_spool_keys(struct index *idx, char ***keys, size_t *n)
{
	sqlite3_stmt *st = NULL;
	char **v = NULL;
	size_t cap = 0;
	int rc;

	*keys = NULL;
	*n = 0;
	pthread_mutex_lock(&idx->spool_lock);
	rc = index_sqlite_errno(
	    sqlite3_prepare_v2(idx->spool_db, "SELECT key FROM spool_object", -1, &st, NULL));
	while (rc == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const unsigned char *key = sqlite3_column_text(st, 0);
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			char **grown = realloc(v, cap * sizeof(*v));
			if (!grown) {
				rc = -ENOMEM;
				break;
			}
			v = grown;
		}
		v[*n] = strdup(key ? (const char *)key : "");
		if (!v[*n]) {
			rc = -ENOMEM;
			break;
		}
		(*n)++;
		rc = 0;
	}
	rc = rc == SQLITE_DONE ? 0 : rc < 0 ? rc : index_step_errno(rc);
	sqlite3_finalize(st);
	pthread_mutex_unlock(&idx->spool_lock);
	if (rc) {
		while (*n)
			free(v[--*n]);
		free(v);
		v = NULL;
	}
	*keys = v;
	return rc;
}

int index_spool_seal(struct index *idx, const char *key, char *seal, size_t len)
{
	sqlite3_stmt *st = NULL;
	int rc;

	seal[0] = '\0';
	pthread_mutex_lock(&idx->spool_lock);
	rc = index_sqlite_errno(sqlite3_prepare_v2(
	    idx->spool_db, "SELECT seal FROM spool_seal WHERE key = :key", -1, &st, NULL));
	if (rc == 0)
		rc = index_bind_text(st, ":key", key, -1);
	if (rc)
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const unsigned char *text = sqlite3_column_text(st, 0);
		snprintf(seal, len, "%s", text ? (const char *)text : "");
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -ENOENT : index_step_errno(rc);
	}
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&idx->spool_lock);
	return rc;
}
