/*
 * Reading back the spool records a previous session left in a persistent cache directory
 * (index_record_ranges / index_record_complete write them). Ranges are recorded only
 * after their bytes were made durable, so what this returns may be served without a
 * request.
 *
 * Lock: idx->lock, as for every statement (see index_i.h). The statements are prepared
 * per call: this runs once per object per session, not per read.
 */
#include <errno.h>

#include "index/index_i.h"
#include "index/ranges.h"

int index_spool_lookup(struct index *idx, const char *key, bool *complete,
                       struct index_ranges *ranges)
{
	sqlite3_stmt *obj = NULL, *rng = NULL;
	int rc;

	index_ranges_clear(ranges);
	pthread_mutex_lock(&idx->lock);
	rc = index_sqlite_errno(sqlite3_prepare_v2(
	    idx->db, "SELECT complete FROM spool_object WHERE key = :key", -1, &obj, NULL));
	if (rc == 0)
		rc = index_sqlite_errno(
		    sqlite3_prepare_v2(idx->db,
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
	pthread_mutex_unlock(&idx->lock);
	return rc;
}
