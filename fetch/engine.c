/*
 * The transfer thread (see engine.h). Lock order when it takes locks: queue_lock alone;
 * flight locks only inside flight.h calls. Streams and the active list belong to the
 * transfer thread alone.
 */
#include "fetch/engine.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch/http.h"
#include "fetch/lease.h"
#include "fetch/log.h"
#include "fetch/recorder.h"
#include "index/index.h"

/* A reader this far ahead of a stream's position gets a stream of its own. */
#define FAR_AHEAD_BYTES FLIGHT_CHUNK_BYTES
/*
 * Splitting a stream for a far reader throws away what the old one has in flight past the
 * split point: on a fast link, the rest of a small object (its tail was fetched twice when
 * a head and a tail reader came together). So a far reader waits for the stream when it
 * will get there within this long, at the rate it has been going; a stream with no rate
 * yet gets this long to show one.
 */
#define SPLIT_WAIT_MS 100
/* A rate measured over less than this is not trusted yet. */
#define RATE_SAMPLE_MS 10
#define RATE_SAMPLE_BYTES (256u << 10)
/*
 * Record progress in the index at least this often per flight (each record costs an
 * fdatasync). While another mount sharing the cache directory watches the download, also
 * whatever arrived every so many milliseconds: that is how quickly its readers see bytes.
 */
#define RECORD_EVERY_BYTES (64u << 20)
#define RECORD_WATCHED_BYTES (16u << 20)
#define RECORD_WATCHED_MS 200
/* How often a flight whose download another mount holds reads that mount's records, and
 * how often a holder looks for such watchers. */
#define WATCH_EVERY_MS 50
#define WATCHERS_EVERY_MS 200
#define MAX_WANTED 32
/* What one request of a whole download asks for: big enough that a request's own cost
 * does not show, small enough that the prefix readers wait on keeps up with the sum. */
#define PIECE_BYTES (8u << 20)
/*
 * Body bytes are written to the spool in runs of up to this, and each transfer's curl
 * receives into a buffer of CURL_BUFFER_BYTES. Measured on a cold 1 GiB read (4 runs
 * each): 512/512 KiB peaked at 17.7 MiB RSS, 256/64 KiB at 13.5 MiB, in the same time.
 */
#define SPOOL_WRITE_BYTES (256u << 10)
#define CURL_BUFFER_BYTES (64L << 10)

struct stream {
	struct engine *engine;
	struct flight *f;
	CURL *easy;
	struct curl_slist *headers;
	uint64_t pos;           /* next byte to write */
	uint64_t end;           /* exclusive; lowered when a far reader splits the stream */
	uint64_t attempt_start; /* pos when this request started */
	uint64_t skip;          /* leading bytes to drop: a 200 answered a ranged request */
	bool checked;           /* status and headers validated */
	bool reached_end;
	bool retryable;         /* the status asked for a retry (5xx, 429, 408) */
	bool stalled;           /* aborted: no byte for the stall timeout */
	bool background;        /* fills the object for nobody in particular */
	unsigned round;         /* the flight's fail_round when it started */
	uint64_t last_byte_ms;  /* when the last header or body byte arrived */
	uint64_t started_ms;    /* when this request started */
	uint64_t first_body_ms; /* when its first body byte arrived, 0 = not yet */
	int fatal;              /* -errno decided in a callback; the flight fails with it */
	bool spool_fault;       /* fatal is ours (the spool), not the server's answer */
	unsigned url_idx;       /* which of the flight's urls it asked */
	char why[160];          /* what went wrong, for the log line */
	struct http_response resp;
	char errbuf[CURL_ERROR_SIZE];
	struct stream *next; /* in f->streams */
};

struct engine {
	struct engine_config cfg;
	struct engine_stats stats;
	CURLM *multi;
	pthread_t thread;
	bool thread_started;

	pthread_mutex_t queue_lock;
	/* Guarded by queue_lock. */
	struct flight *queue;
	bool stopping;

	/* Transfer thread only. */
	struct flight **active;
	size_t n_active;
	size_t cap_active;
	unsigned n_transfers;
	unsigned n_background; /* transfers of streams nobody is waiting on */
	int64_t last_use_stamp;
	struct recorder *recorder; /* with durable: writes progress records; else NULL */
	/*
	 * Transfer thread only: body bytes of one stream not yet written to its spool. curl
	 * hands a body over 16 KiB at a time, and writing each piece on its own cost a pwrite
	 * and a flight update per 16 KiB (65,536 per GiB). Always empty outside
	 * curl_multi_perform, so everything else sees a stream's bytes as written up to pos.
	 */
	struct stream *pending_stream; /* NULL when empty */
	/* Transfer thread only: a flush failed, so some stream curl still runs may carry a
	 * fatal error no callback of its own will report; engine_main ends such streams. */
	bool write_failed;
	uint64_t recheck_ms; /* when a deferred split is looked at again, 0 = none */
	uint64_t pending_off;
	size_t pending_len;
	char *pending_buf; /* SPOOL_WRITE_BYTES */
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void engine_config_defaults(struct engine_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->stall_timeout_s = 30;
	cfg->net.connect_timeout_s = 10;
	cfg->max_tries = 6;
	cfg->max_transfers = 16;
	cfg->max_streams_per_flight = 10;
	cfg->parallel_parts = 8;
	cfg->backoff_base_ms = HTTP_BACKOFF_BASE_MS;
	cfg->backoff_cap_ms = HTTP_BACKOFF_CAP_MS;
}

int engine_create(const struct engine_config *cfg, struct engine **out)
{
	struct engine *e = calloc(1, sizeof(*e));
	int rc = -ENOMEM;

	if (!e)
		goto fail;
	e->cfg = *cfg;
	e->pending_buf = malloc(SPOOL_WRITE_BYTES);
	if (!e->pending_buf)
		goto fail_engine;
	e->multi = curl_multi_init();
	if (!e->multi)
		goto fail_engine;
	pthread_mutex_init(&e->queue_lock, NULL);
	*out = e;
	return 0;
fail_engine:
	free(e->pending_buf);
	free(e);
fail:
	return rc;
}

const struct engine_stats *engine_stats(struct engine *e)
{
	return &e->stats;
}

void engine_kick(struct engine *e, struct flight *f)
{
	bool queued = false;

	pthread_mutex_lock(&e->queue_lock);
	if (!f->engine_queued && !e->stopping) {
		flight_ref(f);
		f->engine_queued = true;
		f->engine_next = e->queue;
		e->queue = f;
		queued = true;
	}
	pthread_mutex_unlock(&e->queue_lock);
	if (queued)
		curl_multi_wakeup(e->multi);
}

/* ---- streams ---------------------------------------------------------------------- */

static void stream_why(struct stream *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void stream_why(struct stream *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->why, sizeof(s->why), fmt, ap);
	va_end(ap);
}

/* Decides, once headers are in, whether this response's body may go into the spool. */
static void check_response(struct stream *s)
{
	struct flight *f = s->f;
	long code = 0;

	s->checked = true;
	curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &code);
	f->last_status = (int)code;
	if (strncmp(f->url, "file:", 5) == 0)
		return; /* curl applied the range itself; there are no headers to check */
	if (code == 206) {
		if (!s->resp.has_content_range || s->resp.range_start != s->pos) {
			s->fatal = -EIO;
			stream_why(
			    s, "206 with a Content-Range that does not match bytes=%" PRIu64 "-",
			    s->pos);
			return;
		}
		if (s->resp.range_total_known && s->resp.range_total != f->size) {
			s->fatal = -EIO;
			stream_why(s, "upstream object has %" PRIu64 " bytes, expected %" PRIu64,
			           s->resp.range_total, f->size);
			return;
		}
		f->ranges_seen = true;
	} else if (code == 200) {
		if (s->resp.has_content_length && s->resp.content_length != f->size) {
			s->fatal = -EIO;
			stream_why(s, "upstream object has %" PRIu64 " bytes, expected %" PRIu64,
			           s->resp.content_length, f->size);
			return;
		}
		/* The server ignored Range: drop what we already have, keep the rest, and stop
		 * asking for parts it would send whole each time. */
		s->skip = s->pos;
		if (s->pos > 0 || s->end < f->size)
			f->no_ranges = true;
		/* It sends the rest of the object anyway: keep it all when no other request is
		 * fetching any of it, rather than ask again from byte 0. */
		if (f->n_streams == 1)
			s->end = f->size;
	} else if (http_status_is_transient(code)) {
		s->retryable = true;
		stream_why(s, "HTTP %ld", code);
		return;
	} else if (code == 412) {
		s->fatal = -EIO;
		stream_why(s, "object changed upstream (ETag %s no longer matches)", f->etag);
		return;
	} else {
		s->fatal = -EIO;
		stream_why(s, "HTTP %ld", code);
		return;
	}
	/* A checksum the store keeps is as good as a manifest's, if it comes before any byte. */
	if (!f->sha256[0] && s->resp.sha256[0] && s->attempt_start == 0 && flight_written(f) == 0)
		memcpy(f->sha256, s->resp.sha256, sizeof(f->sha256));
	if (f->etag[0] == '\0') {
		pthread_mutex_lock(&f->lock);
		snprintf(f->etag, sizeof(f->etag), "%s", s->resp.etag);
		if (s->url_idx == 0 && !f->primary_etag[0])
			snprintf(f->primary_etag, sizeof(f->primary_etag), "%s", s->resp.etag);
		pthread_mutex_unlock(&f->lock);
	} else if (s->resp.etag[0] != '\0' && strcmp(s->resp.etag, f->etag) != 0) {
		s->fatal = -EIO;
		stream_why(s, "object changed upstream (ETag %s, was %s)", s->resp.etag, f->etag);
	}
}

static size_t on_header(char *line, size_t size, size_t nitems, void *userdata)
{
	struct stream *s = userdata;
	size_t len = size * nitems;

	s->last_byte_ms = now_ms();
	http_response_header(&s->resp, line, len);
	return len;
}

/*
 * curl calls this at least once a second, idle or not. A stall is measured from the last
 * byte, not as an average rate: curl's LOW_SPEED check averages over seconds and lets a
 * fast transfer that stopped dead run on for several seconds past the timeout.
 */
static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
	struct stream *s = userdata;

	if (now_ms() - s->last_byte_ms < (uint64_t)s->engine->cfg.stall_timeout_s * 1000)
		return 0;
	s->stalled = true;
	return 1;
}

/* Marks s as failed by a spool write; the first failure is the one its reason names. */
static void stream_write_failed(struct stream *s, int rc)
{
	if (s->fatal)
		return;
	s->fatal = rc;
	s->spool_fault = true;
	stream_why(s, "spool write failed: %s", strerror(-rc));
	s->engine->write_failed = true;
}

/* Writes the pending bytes to their spool. Fails with -errno, which also marks the stream
 * they belong to as failed. */
static int flush_pending(struct engine *e)
{
	struct stream *s = e->pending_stream;
	int rc;

	if (!s)
		return 0;
	rc = flight_deliver(s->f, e->pending_off, e->pending_buf, e->pending_len);
	e->pending_stream = NULL;
	e->pending_len = 0;
	if (rc)
		stream_write_failed(s, rc);
	return rc;
}

/*
 * Takes body bytes for the spool at off; fails with -errno when this stream's bytes could
 * not be written.
 *
 * Runs are not aligned in the file, on purpose. Ending them at multiples of 256 KiB makes
 * the page cache give each one a 256 KiB folio, and a passthrough re-read of 1 GiB faster
 * (0.066 -> 0.048 s through another mount); but on a 2-core VM the cold read became slow
 * half the time (1.1-3.2 s, median 1.5 s against 1.1 s, 8 alternating runs each), with
 * 64% of the transfer thread in copy_folio_from_iter_atomic: most likely, large folios
 * come from memory the VM has never touched, whose first touch is slow (the host backs it
 * then). CI machines are such VMs.
 */
static int take_body(struct stream *s, uint64_t off, const char *data, size_t len)
{
	struct engine *e = s->engine;
	int rc;

	if (e->pending_stream &&
	    (e->pending_stream != s || e->pending_off + e->pending_len != off ||
	     e->pending_len + len > SPOOL_WRITE_BYTES)) {
		bool mine = e->pending_stream == s;
		rc = flush_pending(e);
		if (rc && mine)
			return rc;
	}
	if (len > SPOOL_WRITE_BYTES)
		return flight_deliver(s->f, off, data, len);
	if (!e->pending_stream) {
		e->pending_stream = s;
		e->pending_off = off;
	}
	memcpy(e->pending_buf + e->pending_len, data, len);
	e->pending_len += len;
	return 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct stream *s = userdata;
	size_t len = size * nmemb, used = 0;
	int rc;

	s->last_byte_ms = now_ms();
	if (!s->first_body_ms)
		s->first_body_ms = s->last_byte_ms;
	if (!s->checked)
		check_response(s);
	if (s->fatal || s->retryable)
		return CURL_WRITEFUNC_ERROR;
	atomic_fetch_add_explicit(&s->engine->stats.bytes, len, memory_order_relaxed);
	if (s->skip > 0) {
		used = len < s->skip ? len : (size_t)s->skip;
		s->skip -= used;
	}
	if (used < len && s->pos < s->end) {
		size_t take = len - used;
		if (take > s->end - s->pos)
			take = (size_t)(s->end - s->pos);
		rc = take_body(s, s->pos, data + used, take);
		if (rc) {
			stream_write_failed(s, rc);
			return CURL_WRITEFUNC_ERROR;
		}
		s->pos += take;
		used += take;
	}
	if (s->pos >= s->end) {
		/* Bytes past the object's size are a lie; past a split point they are expected. */
		if (used < len && s->end == s->f->size) {
			s->fatal = -EIO;
			stream_why(s, "upstream sent more than the expected %" PRIu64 " bytes",
			           s->f->size);
			return CURL_WRITEFUNC_ERROR;
		}
		s->reached_end = true;
		return used == len ? len : CURL_WRITEFUNC_ERROR;
	}
	return len;
}

static int stream_start(struct engine *e, struct flight *f, uint64_t start, uint64_t end)
{
	struct stream *s = calloc(1, sizeof(*s));
	char range[64], header[300];
	int rc = -ENOMEM;

	if (!s)
		goto fail;
	s->engine = e;
	s->f = f;
	s->pos = s->attempt_start = start;
	s->end = end;
	s->round = f->fail_round;
	http_response_reset(&s->resp);
	s->easy = curl_easy_init();
	if (!s->easy)
		goto fail_stream;
	s->url_idx = f->url_idx;
	curl_easy_setopt(s->easy, CURLOPT_URL, f->urls[f->url_idx]);
	curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);

	curl_easy_setopt(s->easy, CURLOPT_PROTOCOLS_STR, "http,https,file");
	curl_easy_setopt(s->easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(s->easy, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(s->easy, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(s->easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(s->easy, CURLOPT_HEADERDATA, s);
	curl_easy_setopt(s->easy, CURLOPT_ERRORBUFFER, s->errbuf);
	curl_easy_setopt(s->easy, CURLOPT_BUFFERSIZE, CURL_BUFFER_BYTES);

	/* A stall is "no byte for stall_timeout_s", waiting for headers included. */
	s->last_byte_ms = s->started_ms = now_ms();
	curl_easy_setopt(s->easy, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(s->easy, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(s->easy, CURLOPT_XFERINFODATA, s);

	/* Object keys may hold "./" or "../": the path is sent exactly as it was signed. */
	curl_easy_setopt(s->easy, CURLOPT_PATH_AS_IS, 1L);
	fetch_net_apply(s->easy, &e->cfg.net);
	if (start > 0 || end < f->size) {
		snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, start, end - 1);
		curl_easy_setopt(s->easy, CURLOPT_RANGE, range);
	}
	/* Pin every later request to the version the first response showed us. */
	if (f->etag[0] != '\0' && !http_etag_is_weak(f->etag)) {
		snprintf(header, sizeof(header), "If-Match: %s", f->etag);
		s->headers = curl_slist_append(NULL, header);
		if (!s->headers)
			goto fail_easy;
	}
	if (e->cfg.sign) {
		rc = e->cfg.sign(e->cfg.sign_ctx, f->url, &s->headers);
		if (rc)
			goto fail_easy;
	}
	curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->headers);
	if (curl_multi_add_handle(e->multi, s->easy) != CURLM_OK) {
		rc = -EIO;
		goto fail_easy;
	}
	s->next = f->streams;
	f->streams = s;
	f->n_streams++;
	e->n_transfers++;
	atomic_fetch_add_explicit(&e->stats.requests, 1, memory_order_relaxed);
	fetch_log(FETCH_LOG_DEBUG, "%s: GET bytes %" PRIu64 "-%" PRIu64, f->name, start, end);
	return 0;
fail_easy:
	curl_slist_free_all(s->headers);
	curl_easy_cleanup(s->easy);
fail_stream:
	free(s);
fail:
	return rc;
}

static void stream_free(struct engine *e, struct stream *s)
{
	struct stream **pp;

	/* Never true while the pending bytes are flushed after each perform and streams are
	 * freed outside it; kept so that breaking that rule loses no bytes and frees nothing
	 * still referenced. */
	if (e->pending_stream == s)
		(void)flush_pending(e);
	for (pp = &s->f->streams; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	s->f->n_streams--;
	e->n_transfers--;
	e->n_background -= s->background;
	curl_multi_remove_handle(e->multi, s->easy);
	curl_easy_cleanup(s->easy);
	curl_slist_free_all(s->headers);
	free(s);
}

/* ---- scheduling ------------------------------------------------------------------- */

/* written plus what running streams will write: what nobody needs to ask for again. */
static int claimed_ranges(struct flight *f, struct index_ranges *claimed)
{
	int rc = flight_copy_written(f, claimed);

	for (struct stream *s = f->streams; s && rc == 0; s = s->next)
		rc = index_ranges_add(claimed, s->pos, s->end);
	return rc;
}

static struct stream *stream_covering(struct flight *f, uint64_t off)
{
	for (struct stream *s = f->streams; s; s = s->next)
		if (s->pos <= off && off < s->end)
			return s;
	return NULL;
}

static bool can_start(struct engine *e, struct flight *f)
{
	return e->n_transfers < e->cfg.max_transfers &&
	       f->n_streams < e->cfg.max_streams_per_flight;
}

/* A flight that another mount's download serves; the lease says who downloads. */
static bool watching(const struct engine *e, const struct flight *f)
{
	return e->cfg.lease_path && !f->lease_held;
}

static void fail_flight(struct engine *e, struct flight *f, int err, const char *why);

/*
 * Slots background streams may take: some are always left for readers, so a reader of a
 * new object never waits for whole other objects nobody is reading.
 */
static unsigned background_room(struct engine *e)
{
	unsigned reserve = e->cfg.max_transfers / 4 ? e->cfg.max_transfers / 4 : 1;
	unsigned cap = e->cfg.max_transfers > reserve ? e->cfg.max_transfers - reserve : 1;
	unsigned free_slots;

	if (e->n_background >= cap || e->n_transfers >= e->cfg.max_transfers)
		return 0;
	free_slots = e->cfg.max_transfers - e->n_transfers;
	return cap - e->n_background < free_slots ? cap - e->n_background : free_slots;
}

/* Streams of f that fill the object for nobody in particular. */
static unsigned background_streams(const struct flight *f)
{
	unsigned n = 0;

	for (const struct stream *s = f->streams; s; s = s->next)
		n += s->background;
	return n;
}

/*
 * Starts one piece of a whole download: the gap [gap_start, gap_end) from its start, at
 * most PIECE_BYTES of it unless what would be left is a small tail. Adds it to claimed.
 */
static int start_piece(struct engine *e, struct flight *f, struct index_ranges *claimed,
                       uint64_t gap_start, uint64_t gap_end, bool background)
{
	uint64_t to = gap_end;
	int rc;

	if (!f->no_ranges && gap_end - gap_start >= PIECE_BYTES + PIECE_BYTES / 2)
		to = gap_start + PIECE_BYTES;
	rc = stream_start(e, f, gap_start, to);
	if (rc == 0 && background) {
		f->streams->background = true; /* stream_start puts it first */
		e->n_background++;
	}
	return rc ? rc : index_ranges_add(claimed, gap_start, to);
}

/* Whether f may start another piece now. One slot per flight stays free for far readers. */
static bool room_for_piece(struct engine *e, const struct flight *f)
{
	unsigned room = e->cfg.max_streams_per_flight > 1 ? e->cfg.max_streams_per_flight - 1 : 1;

	/* One request until a 206 shows that the server honours Range: one that answers
	 * each with the whole object would send it again for every piece. */
	return background_room(e) > 0 && f->n_streams < room &&
	       (f->n_streams == 0 ||
	        (f->ranges_seen && !f->no_ranges && background_streams(f) < e->cfg.parallel_parts));
}

/*
 * Keeps up to parallel_parts background pieces running on a whole download, each taking
 * the first unclaimed bytes at or after `from` (then from the start). Pieces in order,
 * not one long part per connection, so the contiguous prefix that sequential readers and
 * the hash wait on grows at the speed of all connections together; several connections
 * win where each is capped.
 */
static int fill_pieces(struct engine *e, struct flight *f, struct index_ranges *claimed,
                       uint64_t from)
{
	uint64_t gap_start, gap_end;
	int rc = 0;

	while (rc == 0 && room_for_piece(e, f)) {
		if (!index_ranges_next_gap(claimed, from, f->size, &gap_start, &gap_end) &&
		    !index_ranges_next_gap(claimed, 0, f->size, &gap_start, &gap_end))
			break;
		rc = start_piece(e, f, claimed, gap_start, gap_end, true);
	}
	return rc;
}

/*
 * A sparse flight's stream for one missed read: its range rounded out to the demand unit,
 * within the gap that holds its first missing byte.
 */
static int start_demand(struct engine *e, struct flight *f, const struct index_ranges *claimed,
                        const struct flight_want *want)
{
	uint64_t from = want->off - want->off % FLIGHT_DEMAND_BYTES, gap_start, gap_end;
	uint64_t to = want->end + (FLIGHT_DEMAND_BYTES - 1) - (want->end - 1) % FLIGHT_DEMAND_BYTES;

	gap_end = from;
	while (index_ranges_next_gap(claimed, gap_end, f->size, &gap_start, &gap_end) &&
	       gap_end <= want->off)
		;
	if (!(gap_start <= want->off && want->off < gap_end))
		return 0;
	return stream_start(e, f, from > gap_start ? from : gap_start, to < gap_end ? to : gap_end);
}

/* The earlier of two times, 0 standing for none. */
static uint64_t earliest(uint64_t a, uint64_t b)
{
	return !a || (b && b < a) ? b : a;
}

/*
 * How long s will take to reach byte `to` at the rate it has been going, in ms:
 * UINT64_MAX when it has shown no rate within SPLIT_WAIT_MS of its start (slow to start:
 * no reason to believe it will be quick); 0 when it is too young to tell, with *recheck
 * set to when it may be.
 */
static uint64_t eta_ms(const struct stream *s, uint64_t to, uint64_t now, uint64_t *recheck)
{
	uint64_t got = s->pos - s->attempt_start, elapsed;

	if (to <= s->pos)
		return 0;
	if (!s->first_body_ms || got == 0 ||
	    (now - s->first_body_ms < RATE_SAMPLE_MS && got < RATE_SAMPLE_BYTES)) {
		if (now - s->started_ms >= SPLIT_WAIT_MS)
			return UINT64_MAX;
		*recheck = s->started_ms + SPLIT_WAIT_MS;
		return 0;
	}
	elapsed = now - s->first_body_ms ? now - s->first_body_ms : 1;
	*recheck = now + RATE_SAMPLE_MS;
	if (to - s->pos > UINT64_MAX / elapsed)
		return UINT64_MAX;
	return (to - s->pos) * elapsed / got;
}

/*
 * Whether a reader waiting at `chunk`, ahead of stream s, should have a stream of its own
 * now (see SPLIT_WAIT_MS). When not, asks the loop to look again by the time it would be.
 */
static bool split_worth(struct engine *e, const struct stream *s, uint64_t chunk, uint64_t now)
{
	uint64_t recheck = 0;

	if (eta_ms(s, chunk, now, &recheck) > SPLIT_WAIT_MS)
		return true;
	e->recheck_ms = earliest(e->recheck_ms, recheck);
	return false;
}

/* Whether s fetches one of the bytes readers wait for (n of them in wanted). */
static bool awaited(const struct stream *s, const struct flight_want *wanted, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (s->pos <= wanted[i].off && wanted[i].off < s->end)
			return true;
	return false;
}

/*
 * Makes room for a stream a reader of f waits on, when the limits leave none: stops a
 * background piece (one that fills an object for nobody in particular, and still nobody
 * waits on) that still has more than SPLIT_WAIT_MS to go, the one with the most to go, of
 * f itself when f is at its own limit, else of any object; never one of a server that
 * ignores ranges, where a new request would start over. Its unfetched part is claimed
 * again by a later piece; what it had in flight is lost, which a reader kept waiting for
 * a whole piece (8 s at 1 MiB/s) would cost more. One about to end is waited for instead.
 * True when there is room now; a stopped piece may have left f a gap to claim.
 */
static bool room_for_reader(struct engine *e, struct flight *f, const struct stream *spare)
{
	bool own = f->n_streams >= e->cfg.max_streams_per_flight;
	struct stream *victim = NULL;
	uint64_t now = now_ms(), recheck = 0, victim_eta = 0;

	if (can_start(e, f))
		return true;
	for (size_t i = 0; i < e->n_active; i++) {
		struct flight *g = e->active[i];
		struct flight_want wanted[MAX_WANTED];
		unsigned n_wanted = 0;
		bool wanted_known = false, whole;
		/* Without ranges a new request starts over from byte 0. */
		if ((own && g != f) || g->no_ranges)
			continue;
		for (struct stream *s = g->streams; s; s = s->next) {
			uint64_t when = 0, eta;
			if (!s->background || s == spare || s->skip > 0)
				continue;
			eta = eta_ms(s, s->end, now, &when);
			if (eta <= SPLIT_WAIT_MS) {
				recheck = earliest(recheck, when);
				continue;
			}
			if (eta <= victim_eta)
				continue;
			/* Started for nobody, but someone may have come to wait for it since. */
			if (!wanted_known) {
				n_wanted = flight_wanted(g, wanted, MAX_WANTED, &whole);
				wanted_known = true;
			}
			if (!awaited(s, wanted, n_wanted)) {
				victim = s;
				victim_eta = eta;
			}
		}
	}
	if (!victim) {
		e->recheck_ms = earliest(e->recheck_ms, recheck);
		return false;
	}
	fetch_log(FETCH_LOG_DEBUG,
	          "%s: background piece at byte %" PRIu64 " stopped for a reader of %s",
	          victim->f->name, victim->pos, f->name);
	stream_free(e, victim);
	return can_start(e, f);
}

/* Starts the streams f needs now: far readers first, then the rest of the object. */
static void schedule(struct engine *e, struct flight *f)
{
	struct flight_want wanted[MAX_WANTED];
	uint64_t gap_start, gap_end;
	struct index_ranges claimed;
	enum flight_state state;
	uint64_t anchor = UINT64_MAX; /* the chunk of the first byte a reader waits for */
	uint64_t written;
	bool whole;
	unsigned n;
	bool no_room = false;
	int rc = 0;

	flight_progress(f, &written, NULL, &state);
	if (state != FLIGHT_ACTIVE || f->spool_fd < 0 || f->retry_due_ms > now_ms() ||
	    watching(e, f))
		return;
	f->retry_due_ms = 0;
	index_ranges_init(&claimed);
	n = flight_wanted(f, wanted, MAX_WANTED, &whole);
	for (unsigned i = 0; i < n && rc == 0; i++) {
		uint64_t off = wanted[i].off, chunk = off - off % FLIGHT_CHUNK_BYTES;
		struct stream *s = stream_covering(f, off);
		anchor = anchor < chunk ? anchor : chunk;
		if (s) {
			if (!whole || off - s->pos <= FAR_AHEAD_BYTES || chunk <= s->pos ||
			    f->no_ranges || !split_worth(e, s, chunk, now_ms()))
				continue;
			/* Once nothing could be stopped, this turn stops trying: each try scans
			 * every stream, and the loop looks again soon (recheck_ms). */
			if (no_room)
				continue;
			if (!room_for_reader(e, f, s)) {
				no_room = true;
				continue;
			}
			/* Split: the new stream takes the far part, the old one stops there. */
			uint64_t end = s->end;
			rc = stream_start(e, f, chunk, end);
			if (rc == 0)
				s->end = chunk;
			continue;
		}
		rc = claimed_ranges(f, &claimed);
		if (rc)
			break;
		if (index_ranges_covers(&claimed, off, off + 1))
			continue; /* written, withheld until verification */
		bool had_room = can_start(e, f);
		if (no_room || !room_for_reader(e, f, NULL))
			break;
		if (!had_room && (rc = claimed_ranges(f, &claimed)) != 0)
			break; /* (a stopped piece left a gap to claim) */
		if (!whole && !f->no_ranges) {
			rc = start_demand(e, f, &claimed, &wanted[i]);
			continue;
		}
		/* The gap holding the reader's byte, from its chunk boundary at the earliest. */
		gap_end = chunk;
		while (index_ranges_next_gap(&claimed, gap_end, f->size, &gap_start, &gap_end) &&
		       gap_end <= off)
			;
		if (gap_start <= off && off < gap_end)
			rc = start_piece(e, f, &claimed, gap_start, gap_end, false);
	}
	/* Once it is read through, the download belongs to the object: with nobody waiting it
	 * still runs to the end, nearest the first waiting reader first. */
	/* Called on every turn of the transfer loop: the ranges are copied only while there is
	 * something left to fetch. */
	if (rc == 0 && whole && written < f->size && room_for_piece(e, f)) {
		rc = claimed_ranges(f, &claimed);
		if (rc == 0)
			rc = fill_pieces(e, f, &claimed, anchor == UINT64_MAX ? 0 : anchor);
	}
	index_ranges_free(&claimed);
	/* Nothing else would ever start a request for it: its readers must not wait forever. */
	if (rc)
		fail_flight(e, f, rc, "cannot start a request");
}

/* ---- flight lifecycle in the engine -------------------------------------------------- */

/* Whether `fresh` bytes written since the last record are worth an fdatasync now. */
static bool record_due(const struct flight *f, uint64_t fresh, uint64_t now, bool force)
{
	if (fresh == 0)
		return false;
	if (force || fresh >= RECORD_EVERY_BYTES)
		return true;
	/* A watching mount sees only what is recorded: often, then. */
	return f->watched &&
	       (fresh >= RECORD_WATCHED_BYTES || now - f->recorded_ms >= RECORD_WATCHED_MS);
}

static void record_progress(struct engine *e, struct flight *f, bool force)
{
	struct index_ranges written;
	uint64_t total;
	enum flight_state state;

	/* Records matter only in a cache directory that a later session may reuse, and only the
	 * lease holder writes them; the last one (complete or failed) is written once. */
	if (!e->recorder || f->final_recorded || atomic_load(&f->durable) ||
	    (e->cfg.lease_path && !f->lease_held))
		return;
	flight_progress(f, &total, NULL, &state);
	if (state == FLIGHT_FAILED) {
		recorder_failed(e->recorder, f);
		f->final_recorded = true;
		return;
	}
	uint64_t now = now_ms();
	if (state != FLIGHT_COMPLETE && !record_due(f, total - f->recorded_bytes, now, force))
		return;
	index_ranges_init(&written);
	if (flight_copy_written(f, &written) == 0) {
		recorder_ranges(e->recorder, f, &written, state == FLIGHT_COMPLETE);
		f->recorded_bytes = total;
		f->recorded_ms = now;
		f->final_recorded = state == FLIGHT_COMPLETE;
	}
	index_ranges_free(&written);
}

static void fail_flight(struct engine *e, struct flight *f, int err, const char *why)
{
	char url[512];

	fetch_log(FETCH_LOG_ERROR, "%s: download failed (%s) from %s", f->name, why,
	          fetch_redact_url(f->urls[f->url_idx], url, sizeof(url)));
	atomic_fetch_add_explicit(&e->stats.failures, 1, memory_order_relaxed);
	while (f->streams)
		stream_free(e, f->streams);
	flight_fail(f, err);
}

/*
 * Only identities that name one version can be reused across sessions: a sha256, or a URL
 * pinned to an ETag. A bare URL may point at new bytes by now.
 */
static bool reusable_key(const char *key)
{
	return strncmp(key, "sha256:", 7) == 0 || strchr(key, '#') != NULL;
}

/*
 * When an object was last put to use, for least-recently-used eviction: wall-clock
 * milliseconds (comparable across sessions), strictly increasing within one, so objects
 * first used in the same millisecond still have an order.
 */
static int64_t use_stamp(struct engine *e)
{
	struct timespec ts;
	int64_t now;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	if (now <= e->last_use_stamp)
		now = e->last_use_stamp + 1;
	e->last_use_stamp = now;
	return now;
}

/*
 * --cache-max-size: evicts complete objects, least recently used first, until the cache
 * fits. Objects in use (open, being read or downloaded) are never evicted; if they alone
 * exceed the limit, the cache stays over it and says so.
 */
static void make_room(struct engine *e, struct flight *f)
{
	struct index_spool_entry lru[64];
	uint64_t bytes = 0;
	size_t n = 0;

	if (index_spool_usage(e->cfg.idx, &bytes, lru, 64, &n) != 0)
		return;
	for (size_t i = 0; i < n && bytes > e->cfg.cache_max_size; i++) {
		if (strcmp(lru[i].key, f->key) == 0 ||
		    flight_table_evict(f->table, lru[i].key) != 0)
			continue;
		if (index_record_complete(e->cfg.idx, lru[i].key, false) == 0)
			bytes -= lru[i].size < bytes ? lru[i].size : bytes;
		fetch_log(FETCH_LOG_DEBUG, "evicted a %" PRIu64 "-byte object from the cache",
		          lru[i].size);
	}
	for (size_t i = 0; i < n; i++)
		free(lru[i].key);
	if (bytes > e->cfg.cache_max_size)
		fetch_log(FETCH_LOG_WARN,
		          "cache holds %" PRIu64 " bytes, over --cache-max-size %" PRIu64
		          ": the rest is in use",
		          bytes, e->cfg.cache_max_size);
}

/* Picks up what a previous session left in a persistent cache. 0 when it did. */
static int reuse_spool(struct engine *e, struct flight *f)
{
	struct index_ranges recorded;
	bool complete = false;
	int rc;

	/* After a failed flight, what its predecessor left is suspect: start afresh. */
	if (!e->cfg.idx || !e->cfg.durable || !reusable_key(f->key) || f->after_failure)
		return -ENOENT;
	index_ranges_init(&recorded);
	rc = index_spool_lookup(e->cfg.idx, f->key, &complete, &recorded);
	if (rc == 0)
		rc = flight_reopen_spool(f, &recorded, complete, false);
	if (rc == 0) {
		f->recorded_bytes = recorded.total;
		if (complete)
			atomic_store(&f->durable, true);
		fetch_log(FETCH_LOG_INFO,
		          "%s: %s from the cache (%" PRIu64 " of %" PRIu64 " bytes)", f->name,
		          complete ? "served" : "resumed", recorded.total, f->size);
	}
	index_ranges_free(&recorded);
	return rc;
}

/* This mount downloads f: from what the cache holds, else from the start. */
static void start_owned(struct engine *e, struct flight *f)
{
	int rc;

	if (e->cfg.durable && e->cfg.idx && e->cfg.cache_max_size)
		make_room(e, f);
	rc = reuse_spool(e, f);
	if (rc == 0)
		return;
	if (f->spool_fd >= 0) {
		fail_flight(e, f, rc, "cannot restore the spool file");
		return;
	}
	/* Stale records must go before the file is truncated, or a crash could restore them. */
	if (e->cfg.durable && e->cfg.idx) {
		rc = index_spool_reset(e->cfg.idx, f->key);
		if (rc) {
			fail_flight(e, f, rc, "cannot update the cache index");
			return;
		}
	}
	rc = flight_open_spool(f);
	if (rc) {
		char why[128];
		snprintf(why, sizeof(why), "%s: %s",
		         rc == -ENOSPC ? "no space left in the cache directory"
		                       : "cannot create the spool file",
		         strerror(-rc));
		fail_flight(e, f, rc, why);
		return;
	}
	if (f->size == 0) {
		rc = flight_complete_empty(f);
		if (rc)
			fail_flight(e, f, rc, "sha256 mismatch");
	}
}

/*
 * Lets other mounts take the download over: once finished, failed or stopped. Through the
 * recorder, so the lease goes only after the records the next holder starts from.
 */
static void release_lease(struct engine *e, struct flight *f)
{
	if (f->lease_fd >= 0 && e->recorder && f->lease_held)
		recorder_release(e->recorder, f->lease_fd);
	else if (f->lease_fd >= 0)
		close(f->lease_fd);
	f->lease_fd = -1;
	f->lease_held = false;
}

/*
 * A holder's readers may all be sparse, but a mount watching its download can only wait for
 * what it fetches: once watched, it fetches everything, and records progress often.
 */
static void look_for_watchers(struct flight *f, uint64_t now)
{
	f->next_watch_ms = now + WATCHERS_EVERY_MS;
	if (f->watched || !lease_watched(f->lease_fd, f->key))
		return;
	f->watched = true;
	flight_fetch_whole(f);
}

/*
 * The mount that was downloading f let go: finished, failed, unmounted or killed. What it
 * recorded says which; an unfinished download continues here from its recorded ranges.
 */
static void take_over(struct engine *e, struct flight *f)
{
	struct index_ranges recorded;
	bool complete = false;
	struct stat st;
	int rc;

	f->lease_held = true;
	if (f->spool_fd < 0) {
		start_owned(e, f); /* it never got far enough to show us a spool */
		return;
	}
	/* A download that fails deletes its spool: its readers got the error, ours do too. */
	if (fstat(f->spool_fd, &st) != 0 || st.st_nlink == 0) {
		fail_flight(e, f, -EIO, "the download in another mount of the cache failed");
		return;
	}
	flight_claim_spool(f);
	index_ranges_init(&recorded);
	rc = index_spool_lookup(e->cfg.idx, f->key, &complete, &recorded);
	if (rc == 0) {
		rc = flight_adopt(f, &recorded, complete);
		f->recorded_bytes = recorded.total;
		if (complete)
			atomic_store(&f->durable, true);
	}
	index_ranges_free(&recorded);
	/* Without a record, what was adopted earlier was recorded then: keep going from it. */
	if (rc && rc != -ENOENT) {
		fail_flight(e, f, rc, "cannot take over another mount's download");
		return;
	}
	fetch_log(FETCH_LOG_INFO,
	          "%s: %s the download from another mount (%" PRIu64 " of %" PRIu64 " bytes local)",
	          f->name, complete ? "finished by" : "took over", flight_written(f), f->size);
}

/* True when f's spool path still names the file f has open. */
static bool spool_still_named(struct flight *f)
{
	struct stat named, open_file;

	return f->spool_path && stat(f->spool_path, &named) == 0 &&
	       fstat(f->spool_fd, &open_file) == 0 && named.st_ino == open_file.st_ino &&
	       named.st_dev == open_file.st_dev;
}

/*
 * Another mount holds f's lease: serves its readers what that mount has recorded, from the
 * same spool file, and takes over when the lease comes free. The records are read after
 * the file is opened and trusted only while the path still names that file: a holder that
 * starts afresh makes a new file, and the old one's records say nothing about it.
 */
static void watch(struct engine *e, struct flight *f)
{
	struct index_ranges none, recorded;
	bool complete = false;
	int rc = lease_try(f->lease_fd, f->key);

	f->next_watch_ms = now_ms() + WATCH_EVERY_MS;
	if (rc == 1) {
		take_over(e, f);
		return;
	}
	index_ranges_init(&none);
	index_ranges_init(&recorded);
	if (rc == 0 && f->spool_fd < 0) {
		/* Opened with nothing adopted yet: what it holds is decided below. */
		rc = flight_reopen_spool(f, &none, false, true);
		/* Not created, or not sized, yet: the holder has only just started. */
		if (f->spool_fd < 0 && (rc == -ENOENT || rc == -ESTALE))
			rc = 1;
	}
	if (rc == 0)
		rc = index_spool_lookup(e->cfg.idx, f->key, &complete, &recorded);
	if (rc == -ENOENT || rc == -EBUSY)
		rc = 1; /* nothing recorded yet, or another mount is writing: next time */
	if (rc == 0 && !spool_still_named(f)) {
		rc = -ESTALE;
		fetch_log(FETCH_LOG_WARN, "%s: the other mount restarted its download; reopen it",
		          f->name);
	}
	if (rc == 0)
		rc = flight_adopt(f, &recorded, complete);
	index_ranges_free(&recorded);
	if (rc < 0)
		fail_flight(e, f, rc, "cannot follow another mount's download");
}

static int activate(struct engine *e, struct flight *f)
{
	int rc;

	if (e->n_active == e->cap_active) {
		size_t cap = e->cap_active ? e->cap_active * 2 : 16;
		struct flight **v = realloc(e->active, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		e->active = v;
		e->cap_active = cap;
	}
	f->engine_started = true;
	flight_ref(f);
	e->active[e->n_active++] = f;
	if (e->cfg.durable && e->cfg.idx)
		index_spool_touch(e->cfg.idx, f->key, f->size, use_stamp(e));
	if (e->cfg.lease_path) {
		rc = f->lease_fd = lease_open(e->cfg.lease_path);
		if (rc >= 0)
			rc = lease_try(f->lease_fd, f->key);
		if (rc < 0) {
			fail_flight(e, f, rc, "cannot lock the cache directory's lease file");
			return 0;
		}
		f->lease_held = rc == 1;
		/* Said before the first look at the records: the holder then goes whole. */
		if (!f->lease_held && (rc = lease_watch(f->lease_fd, f->key)) < 0) {
			fail_flight(e, f, rc, "cannot lock the cache directory's lease file");
			return 0;
		}
		if (!f->lease_held) {
			fetch_log(FETCH_LOG_INFO,
			          "%s: another mount of the cache is downloading it", f->name);
			watch(e, f);
			return 0;
		}
	}
	start_owned(e, f);
	return 0;
}

/*
 * After a failed attempt the next goes to the next mirror. A hash keeps bytes from two
 * servers honest, so a hashed object switches at any point and drops its pinned ETag
 * (mirrors need not agree on ETags); an unhashed one switches only before its first byte.
 */
static bool may_switch_mirror(struct flight *f)
{
	return f->n_urls > 1 && (f->sha256[0] || flight_written(f) == 0);
}

/* Whether url i answered this flight with a refusal (see url_refused in flight.h). */
static bool refused(const struct flight *f, unsigned i)
{
	return f->urls_refused >> i & 1u; /* i < n_urls <= FLIGHT_MAX_URLS */
}

static void next_mirror(struct flight *f)
{
	unsigned next = f->url_idx;

	if (!may_switch_mirror(f))
		return;
	do
		next = (next + 1) % f->n_urls;
	while (refused(f, next) && next != f->url_idx);
	pthread_mutex_lock(&f->lock);
	f->url_idx = next;
	/* A version the source named is part of the object's identity: every mirror must
	 * serve that one (the key says so). */
	if (f->sha256[0] || !f->source_etag)
		f->etag[0] = '\0';
	pthread_mutex_unlock(&f->lock);
}

/*
 * A mirror that refuses an object (404, a size or version that is not the manifest's, a
 * certificate it cannot prove) is often one not yet synced: the object goes on from the
 * other URLs, and fails only once each has refused it (or, unhashed, once bytes came from
 * one of them). True when it goes on.
 */
static bool try_other_mirror(struct engine *e, struct flight *f, unsigned from, const char *why)
{
	char url[512];

	if (!may_switch_mirror(f))
		return false;
	f->urls_refused |= 1u << from;
	if (f->url_idx == from) /* else another stream of it has switched already */
		next_mirror(f);
	if (refused(f, f->url_idx))
		return false;
	fetch_log(FETCH_LOG_WARN, "%s: %s from %s; trying %s", f->name, why,
	          fetch_redact_url(f->urls[from], url, sizeof(url)),
	          f->url_idx == 0 ? "the manifest's URL" : "the next mirror");
	atomic_fetch_add_explicit(&e->stats.retries, 1, memory_order_relaxed);
	return true;
}

static void on_done(struct engine *e, struct stream *s, CURLcode result)
{
	struct flight *f = s->f;
	uint64_t progress = s->pos - s->attempt_start;
	char why[200];
	int fatal;

	if (!s->checked && result == CURLE_OK)
		check_response(s);
	if (s->reached_end && !s->fatal) {
		/* A reader's range is worth a record at once; pieces of a whole download are
		 * recorded every so many bytes (each record is an fdatasync), and at completion. */
		bool for_reader = !s->background;
		f->failures = 0;
		stream_free(e, s);
		record_progress(e, f, for_reader);
		return;
	}
	fatal = s->fatal;
	if (fatal == 0 && !s->retryable && result == CURLE_OK) {
		fatal = -EIO;
		stream_why(s, "upstream body ended at byte %" PRIu64 ", expected %" PRIu64, s->pos,
		           s->end);
	}
	if (fatal == 0 && s->stalled) {
		stream_why(s, "no byte for %u s (stalled)", e->cfg.stall_timeout_s);
	} else if (fatal == 0 && !s->retryable) {
		if (!http_curl_error_is_transient(result))
			fatal = -EIO;
		stream_why(s, "%s", s->errbuf[0] ? s->errbuf : curl_easy_strerror(result));
	}
	snprintf(why, sizeof(why), "%s", s->why);
	int retry_after = s->retryable ? s->resp.retry_after_s : -1;
	unsigned round = s->round;
	bool servers_answer = !s->spool_fault;
	unsigned asked = s->url_idx;
	stream_free(e, s);
	if (fatal && servers_answer && try_other_mirror(e, f, asked, why))
		return;
	if (fatal) {
		fail_flight(e, f, fatal, why);
		return;
	}
	/* An outage cuts every connection of a flight at once: the streams started before the
	 * last counted failure share its try, its backoff and its mirror switch (counting each
	 * would use up the tries at once and switch mirrors back and forth). */
	if (round != f->fail_round) {
		fetch_log(FETCH_LOG_DEBUG, "%s: %s (counted with the previous failure)", f->name,
		          why);
		return;
	}
	f->fail_round++;
	if (progress > 0)
		f->failures = 0;
	f->failures++;
	if (f->failures >= e->cfg.max_tries) {
		char msg[260];
		snprintf(msg, sizeof(msg), "giving up after %u tries, last: %s", f->failures, why);
		fail_flight(e, f, -EIO, msg);
		return;
	}
	uint64_t delay =
	    http_backoff_ms(f->failures, e->cfg.backoff_base_ms, e->cfg.backoff_cap_ms,
	                    fetch_net_jitter(), retry_after, 4 * e->cfg.backoff_cap_ms);
	char url[512];
	uint64_t written = 0;
	flight_progress(f, &written, NULL, NULL);
	fetch_log(FETCH_LOG_WARN,
	          "%s: %s from %s; retry %u in %" PRIu64 " ms (%" PRIu64 " of %" PRIu64
	          " bytes local)",
	          f->name, why, fetch_redact_url(f->urls[f->url_idx], url, sizeof(url)),
	          f->failures, delay, written, f->size);
	atomic_fetch_add_explicit(&e->stats.retries, 1, memory_order_relaxed);
	next_mirror(f);
	/* Other streams of this flight keep going; new ones wait for the backoff. */
	uint64_t due = now_ms() + delay;
	if (f->retry_due_ms < due)
		f->retry_due_ms = due;
}

/* Drops flights that need nothing more from the engine. */
static void retire_finished(struct engine *e)
{
	size_t kept = 0;

	for (size_t i = 0; i < e->n_active; i++) {
		struct flight *f = e->active[i];
		enum flight_state state;
		flight_progress(f, NULL, NULL, &state);
		if (state != FLIGHT_ACTIVE && f->n_streams == 0) {
			if (state == FLIGHT_COMPLETE)
				atomic_fetch_add_explicit(&e->stats.completed, 1,
				                          memory_order_relaxed);
			record_progress(e, f, true);
			release_lease(e, f);
			flight_engine_done(f);
			flight_unref(f);
			continue;
		}
		e->active[kept++] = f;
	}
	e->n_active = kept;
}

static void drain_queue(struct engine *e)
{
	struct flight *f;

	pthread_mutex_lock(&e->queue_lock);
	f = e->queue;
	e->queue = NULL;
	/* Once unqueued, a flight can be queued again (engine_next rewritten) at any time. */
	for (struct flight *q = f; q; q = q->engine_next) {
		q->engine_queued = false;
		q->engine_drain_next = q->engine_next;
	}
	pthread_mutex_unlock(&e->queue_lock);
	while (f) {
		struct flight *next = f->engine_drain_next;
		enum flight_state state;
		flight_progress(f, NULL, NULL, &state);
		if (!f->engine_started && state == FLIGHT_ACTIVE && activate(e, f) != 0)
			fail_flight(e, f, -ENOMEM, "out of memory");
		if (f->engine_started)
			schedule(e, f);
		flight_unref(f);
		f = next;
	}
}

/*
 * Ends every stream still running with a spool write failure. A flush can fail for a
 * stream other than the one whose callback is running, or after curl_multi_perform: curl
 * keeps such a stream until its next callback, which an idle upstream may not send before
 * the stall timeout, and until then its unwritten bytes would look unclaimed to
 * schedule() and be asked for again. on_done may free other streams and flights: start
 * over after each.
 */
static void end_failed_streams(struct engine *e)
{
	e->write_failed = false;
again:
	for (size_t i = 0; i < e->n_active; i++) {
		for (struct stream *s = e->active[i]->streams; s; s = s->next) {
			if (s->fatal) {
				on_done(e, s, CURLE_WRITE_ERROR);
				goto again;
			}
		}
	}
}

static void *engine_main(void *arg)
{
	struct engine *e = arg;
	sigset_t all;
	bool stopping = false;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	while (!stopping) {
		int running = 0, pending;
		CURLMsg *msg;
		long timeout = 1000;
		uint64_t now;

		drain_queue(e);
		curl_multi_perform(e->multi, &running);
		(void)flush_pending(e); /* a failure marks its stream: see end_failed_streams */
		while ((msg = curl_multi_info_read(e->multi, &pending))) {
			struct stream *s = NULL;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
			on_done(e, s, msg->data.result);
		}
		if (e->write_failed)
			end_failed_streams(e);
		now = now_ms();
		for (size_t i = 0; i < e->n_active; i++) {
			struct flight *f = e->active[i];
			if (watching(e, f)) {
				enum flight_state state;
				flight_progress(f, NULL, NULL, &state);
				if (state != FLIGHT_ACTIVE)
					continue; /* failed or finished: retire_finished lets it go
					           */
				if (f->next_watch_ms <= now)
					watch(e, f);
				if (watching(e, f) && (long)(f->next_watch_ms - now) < timeout)
					timeout = (long)(f->next_watch_ms - now);
				continue;
			}
			if (f->lease_held && f->next_watch_ms <= now)
				look_for_watchers(f, now);
			if (f->lease_held && !f->watched &&
			    (long)(f->next_watch_ms - now) < timeout)
				timeout = (long)(f->next_watch_ms - now);
			if (f->retry_due_ms && f->retry_due_ms > now) {
				if ((long)(f->retry_due_ms - now) < timeout)
					timeout = (long)(f->retry_due_ms - now);
				continue;
			}
			schedule(e, f);
			record_progress(e, f, false);
		}
		retire_finished(e);
		if (e->recheck_ms) {
			now = now_ms();
			if ((long)(e->recheck_ms - now) < timeout)
				timeout = e->recheck_ms > now ? (long)(e->recheck_ms - now) : 1;
			e->recheck_ms = 0; /* schedule sets it again while it still defers */
		}
		curl_multi_poll(e->multi, NULL, 0, timeout > 0 ? (int)timeout : 1, NULL);
		pthread_mutex_lock(&e->queue_lock);
		stopping = e->stopping;
		pthread_mutex_unlock(&e->queue_lock);
	}
	return NULL;
}

int engine_start(struct engine *e)
{
	int rc = 0;

	/* Records matter only in a cache directory that a later session may reuse. */
	if (e->cfg.durable && e->cfg.idx)
		rc = recorder_start(e->cfg.idx, &e->recorder);
	if (rc)
		return rc;
	rc = pthread_create(&e->thread, NULL, engine_main, e);
	if (rc) {
		recorder_stop(e->recorder);
		e->recorder = NULL;
		return -rc;
	}
	pthread_setname_np(e->thread, "spoolfs-xfer");
	e->thread_started = true;
	return 0;
}

void engine_stop(struct engine *e)
{
	pthread_mutex_lock(&e->queue_lock);
	bool already = e->stopping;
	e->stopping = true;
	pthread_mutex_unlock(&e->queue_lock);
	if (already)
		return;
	curl_multi_wakeup(e->multi);
	if (e->thread_started)
		pthread_join(e->thread, NULL);
	/* The thread is gone: this thread now owns the engine's state. */
	pthread_mutex_lock(&e->queue_lock);
	struct flight *queued = e->queue;
	e->queue = NULL;
	pthread_mutex_unlock(&e->queue_lock);
	while (queued) {
		struct flight *next = queued->engine_next;
		if (!queued->engine_started)
			flight_stop(queued, -EIO); /* its parked readers must not wait forever */
		flight_unref(queued);
		queued = next;
	}
	for (size_t i = 0; i < e->n_active; i++) {
		enum flight_state state;
		flight_progress(e->active[i], NULL, NULL, &state);
		if (state == FLIGHT_ACTIVE) {
			while (e->active[i]->streams)
				stream_free(e, e->active[i]->streams);
			/* Kept for the next session: a persistent cache resumes from here. */
			record_progress(e, e->active[i], true);
			flight_stop(e->active[i], -EIO);
		} else {
			/* Finished or failed since the last retire: its final record first. */
			record_progress(e, e->active[i], true);
		}
		release_lease(e, e->active[i]);
		flight_unref(e->active[i]);
	}
	e->n_active = 0;
	/* Every record queued above is written before the index closes. */
	recorder_stop(e->recorder);
	e->recorder = NULL;
}

void engine_destroy(struct engine *e)
{
	if (!e)
		return;
	engine_stop(e);
	curl_multi_cleanup(e->multi);
	pthread_mutex_destroy(&e->queue_lock);
	free(e->pending_buf);
	free(e->active);
	free(e);
}
