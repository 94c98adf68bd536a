/*
 * One request of a flight: its curl handle, the checks on its answer, and the path of its
 * body into the spool (held back in runs, see stream_take_body; a compressed object's is
 * decompressed first, unframe.c). Transfer thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/http/beneath.h"
#include "fetch/engine/engine_i.h"
#include "util/log.h"

void stream_why(struct stream *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->why, sizeof(s->why), fmt, ap);
	va_end(ap);
}

/*
 * A Last-Modified within a second of the response's Date may name several versions (RFC
 * 9110 8.8.2.2): a dynamic endpoint's "now" would fail every request after the first.
 */
static bool last_modified_is_strong(const struct http_response *resp)
{
	time_t modified = curl_getdate(resp->last_modified, NULL);
	time_t date = resp->date[0] ? curl_getdate(resp->date, NULL) : -1;

	return resp->last_modified[0] && modified >= 0 && (date < 0 || date - modified >= 1);
}

/*
 * Bytes of two responses may share a spool only if both show the same version (RFC 9110
 * 15.3.7.3): the first response's ETag, or without one its Last-Modified, is pinned, and
 * a later response that shows another, or none where one was pinned, fails the flight. A
 * server that sends neither cannot be checked (README says so). Hashed objects: below.
 */
static void check_version(struct stream *s)
{
	struct flight *f = s->f;

	if (!f->xfer.version.seen && f->xfer.version.etag[0] == '\0') {
		f->xfer.version.seen = true;
		pthread_mutex_lock(&f->lock);
		snprintf(f->xfer.version.etag, sizeof(f->xfer.version.etag), "%s", s->resp.etag);
		if (s->url_idx == 0 && !f->xfer.version.primary_etag[0])
			snprintf(f->xfer.version.primary_etag, sizeof(f->xfer.version.primary_etag),
			         "%s", s->resp.etag);
		/* Not a hashed object's: copies on several servers may differ in date only. */
		if (!s->resp.etag[0] && !flight_hash_names_version(f) &&
		    last_modified_is_strong(&s->resp))
			snprintf(f->xfer.version.last_modified,
			         sizeof(f->xfer.version.last_modified), "%s",
			         s->resp.last_modified);
		pthread_mutex_unlock(&f->lock);
		return;
	}
	f->xfer.version.seen = true;
	/* Only a different ETag fails a hashed object (its sparse reads, answered before the
	 * hash, must stay one version), not a missing one nor a Last-Modified. */
	if (flight_hash_names_version(f)) {
		if (f->xfer.version.etag[0] && s->resp.etag[0] &&
		    strcmp(s->resp.etag, f->xfer.version.etag) != 0) {
			s->fatal = -EIO;
			stream_why(s, "object changed upstream (ETag %s, was %s)", s->resp.etag,
			           f->xfer.version.etag);
		}
		return;
	}
	if (f->xfer.version.etag[0] != '\0' && strcmp(s->resp.etag, f->xfer.version.etag) != 0) {
		s->fatal = -EIO;
		stream_why(s, "object changed upstream (ETag %s, was %s)",
		           s->resp.etag[0] ? s->resp.etag : "absent", f->xfer.version.etag);
	} else if (f->xfer.version.etag[0] == '\0' && s->resp.etag[0] != '\0') {
		s->fatal = -EIO;
		stream_why(s, "object changed upstream (ETag %s, where there was none)",
		           s->resp.etag);
	} else if (f->xfer.version.last_modified[0] != '\0' &&
	           strcmp(s->resp.last_modified, f->xfer.version.last_modified) != 0) {
		s->fatal = -EIO;
		stream_why(s, "object changed upstream (Last-Modified %s, was %s)",
		           s->resp.last_modified[0] ? s->resp.last_modified : "absent",
		           f->xfer.version.last_modified);
	}
}

/*
 * A ranged request of s answered with the whole object. It sends the rest of the object
 * anyway: keep it all, rather than ask again from byte 0, and stop the requests above this
 * one, which would each be sent the object from byte 0 too (a server that honoured the
 * first Range and no other sent 4x the object). One below it, if it too gets the whole
 * object, does the same in turn. Stopped here by their end; the loop ends them (curl's
 * callbacks must not remove other transfers).
 */
static void take_whole_answer(struct stream *s)
{
	struct flight *f = s->f;

	s->skip = flight_is_compressed(f) ? unframe_stored_pos(s) : s->pos;
	f->xfer.no_ranges = true;
	if (s->end <= s->pos)
		return; /* stopped already by another such answer */
	s->end = f->size;
	for (struct stream *t = f->xfer.streams; t; t = t->next) {
		if (t != s && t->pos > s->pos) {
			t->end = t->pos;
			s->engine->streams_stopped = true;
		}
	}
}

/* The length f's URL serves: its stored bytes, compressed or not. */
static uint64_t stored_size(const struct flight *f)
{
	return flight_is_compressed(f) ? f->frames.stored_off[f->frames.n] : f->size;
}

/*
 * Whether the object's size the answer gives, if it gives one, is the index's. One compressed
 * on the way (Accept-Encoding: identity was asked for) has bytes that are not the object's,
 * unless their total is the object's size: stored that way. Fails s if not.
 */
static bool size_as_expected(struct stream *s, bool said, uint64_t total)
{
	uint64_t size = stored_size(s->f);

	if (said && total != size) {
		s->fatal = -EIO;
		stream_why(s, "upstream object has %" PRIu64 " bytes, expected %" PRIu64 "%s",
		           total, size, flight_is_compressed(s->f) ? " (stored compressed)" : "");
		return false;
	}
	if (s->resp.encoded && !said) {
		s->fatal = -EIO;
		stream_why(s, "a compressed answer (Content-Encoding) of unknown total size");
		return false;
	}
	return true;
}

/* Decides, once headers are in, whether this response's body may go into the spool. */
void stream_check_response(struct stream *s)
{
	struct flight *f = s->f;
	long code = 0;

	s->checked = true;
	curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &code);
	util_histogram_set_observe(&s->engine->stats->latency, code > 0 ? (unsigned)code : 0,
	                           util_monotonic_ns() - s->clock.started_ns);
	f->xfer.last_status = (int)code;
	if (strncmp(f->src.urls[s->url_idx], "file:", 5) == 0)
		return; /* curl applied the range itself; there are no headers to check */
	if (code == 206) {
		uint64_t asked = flight_is_compressed(f) ? unframe_stored_pos(s) : s->pos;
		if (!s->resp.has_content_range || s->resp.range_start != asked) {
			s->fatal = -EIO;
			stream_why(
			    s, "206 with a Content-Range that does not match bytes=%" PRIu64 "-",
			    asked);
			return;
		}
		if (!size_as_expected(s, s->resp.range_total_known, s->resp.range_total))
			return;
		/* A server may send less than asked (RFC 9110 15.3.7) and say so: this request
		 * ends there, and the rest is asked for again. */
		if (flight_is_compressed(f)) {
			/* In stored bytes: this request ends after the last whole frame sent. */
			uint64_t whole = flight_frames_whole_end(f, s->resp.range_end + 1);
			if (whole < s->end) {
				s->end = whole > s->pos ? whole : s->pos;
				s->answered_short = true;
			}
			/* Not one whole frame: asked again, it would answer the same (a CDN or
			 * proxy that caps a range's length). Said so, and counted as a try. */
			if (whole <= s->pos)
				stream_why(s,
				           "the server caps ranges below one frame (%" PRIu64
				           " stored bytes sent of frame %" PRIu64 "'s %" PRIu64 ")",
				           s->resp.range_end + 1 - s->resp.range_start, s->z.frame,
				           f->frames.stored_off[s->z.frame + 1] -
				               f->frames.stored_off[s->z.frame]);
		} else if (s->resp.range_end < s->end - 1) {
			s->end = s->resp.range_end + 1;
			s->answered_short = true;
		}
		f->xfer.ranges_seen = true;
	} else if (code == 200) {
		if (!size_as_expected(s, s->resp.has_content_length, s->resp.content_length))
			return;
		/* A request without Range gets the whole object, as asked: its end may have been
		 * lowered since (a far reader's split), and stays so. One with Range means the
		 * server ignores Range: drop what we already have, keep the rest, and stop asking
		 * for parts it would send whole each time. */
		if (s->ranged)
			take_whole_answer(s);
	} else if (http_status_is_transient(code)) {
		s->retryable = true;
		if (code == 503 || code == 429)
			engine_note_throttled(s->engine);
		stream_why(s, "HTTP %ld", code);
		return;
	} else if (code == 412) {
		s->fatal = -EIO;
		stream_why(s, "object changed upstream (ETag %s no longer matches)",
		           f->xfer.version.etag);
		return;
	} else if ((code == 400 || code == 403) && s->auth.creds_gen &&
	           s->engine->cfg.error_is_expired) {
		/* Read the (small) error body: on_done tells expired credentials apart. */
		s->auth.refused = true;
		stream_why(s, "HTTP %ld", code);
		return;
	} else {
		s->fatal = -EIO;
		stream_why(s, "HTTP %ld", code);
		return;
	}
	/* A checksum the store keeps is as good as a manifest's, if it comes before any byte;
	 * a compressed object's is the hash of its stored frames, not of the object. */
	if (!f->verify.sha256[0] && s->resp.sha256[0] && !flight_is_compressed(f) &&
	    s->attempt_start == 0 && flight_written(f) == 0)
		memcpy(f->verify.sha256, s->resp.sha256, sizeof(f->verify.sha256));
	check_version(s);
}

static size_t on_header(char *line, size_t size, size_t nitems, void *userdata)
{
	struct stream *s = userdata;
	size_t len = size * nitems;

	s->clock.last_byte_ms = now_ms();
	http_response_header(&s->resp, line, len);
	return len;
}

/* Whether no other stream of s's flight is behind it. */
static bool first_of_flight(const struct stream *s)
{
	for (const struct stream *t = s->f->xfer.streams; t; t = t->next)
		if (t->pos < s->pos)
			return false;
	return true;
}

/*
 * curl calls this at least once a second, idle or not. A stall is measured from the last
 * byte, not as an average rate: curl's LOW_SPEED check averages over seconds and lets a
 * fast transfer that stopped dead run on for several seconds past the timeout. A server
 * that trickles a byte now and then never stalls that way, so each stall timeout's worth
 * of time must also bring FETCH_NET_LOW_SPEED_BYTES_PER_S on average.
 */
static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
	struct stream *s = userdata;
	uint64_t now = now_ms(), window = (uint64_t)s->engine->cfg.stall_timeout_s * 1000;

	if (now - s->clock.last_byte_ms >= window) {
		s->stalled = true;
		return 1;
	}
	if (now - s->clock.window_ms < window)
		return 0;
	/* The floor is the object's: its parallel requests share it, but the first of them,
	 * the one a sequential reader waits on, must keep it alone. */
	unsigned shares = first_of_flight(s) || !s->f->xfer.n_streams ? 1 : s->f->xfer.n_streams;
	if (s->received - s->clock.window_bytes <
	    (uint64_t)FETCH_NET_LOW_SPEED_BYTES_PER_S * s->engine->cfg.stall_timeout_s / shares) {
		s->too_slow = true;
		return 1;
	}
	s->clock.window_ms = now;
	s->clock.window_bytes = s->received;
	return 0;
}

void stream_write_failed(struct engine *e, struct flight *f, struct stream *s, int rc)
{
	char why[96];

	snprintf(why, sizeof(why), "spool write failed: %s", strerror(-rc));
	if (!s) {
		engine_fail_flight(e, f, rc, why);
		return;
	}
	if (s->fatal)
		return;
	s->fatal = rc;
	s->spool_fault = true;
	stream_why(s, "%s", why);
	e->write_failed = true;
}

/* Writes the pending bytes to their spool. Fails with -errno, which also marks the stream
 * they belong to as failed. */
/*
 * Writes body bytes of s to its spool, then notes them for a restart when a note is due.
 * Noted here, not once per turn of the transfer thread: behind on a loaded machine, one
 * curl_multi_perform goes on reading while each connection's full socket buffer has more,
 * and a serving process killed in it had 7-23 MiB written but not noted (8 readers of a
 * 256 MiB object over 10 connections, on 2 cores with three busy loops beside them).
 */
static int deliver(struct engine *e, struct stream *s, uint64_t off, const char *data, size_t len)
{
	int rc = flight_deliver_from(s->f, s->url_idx, off, data, len);

	if (rc == 0)
		engine_cache_note_written(e, s->f);
	return rc;
}

int stream_flush_pending(struct engine *e)
{
	struct stream *s = e->pending.stream;
	int rc;

	if (!s)
		return 0;
	rc = deliver(e, s, e->pending.off, e->pending.buf, e->pending.len);
	e->pending.stream = NULL;
	e->pending.len = 0;
	if (rc)
		stream_write_failed(s->engine, s->f, s, rc);
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
int stream_take_body(struct stream *s, uint64_t off, const char *data, size_t len)
{
	struct engine *e = s->engine;
	int rc;

	if (e->pending.stream &&
	    (e->pending.stream != s || e->pending.off + e->pending.len != off ||
	     e->pending.len + len > SPOOL_WRITE_BYTES)) {
		bool mine = e->pending.stream == s;
		rc = stream_flush_pending(e);
		if (rc && mine)
			return rc;
	}
	if (len > SPOOL_WRITE_BYTES)
		return deliver(e, s, off, data, len);
	if (!e->pending.stream) {
		e->pending.stream = s;
		e->pending.off = off;
	}
	memcpy(e->pending.buf + e->pending.len, data, len);
	e->pending.len += len;
	return 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct stream *s = userdata;
	size_t len = size * nmemb, used = 0;
	int rc;

	s->clock.last_byte_ms = now_ms();
	if (!s->clock.first_body_ms)
		s->clock.first_body_ms = s->clock.last_byte_ms;
	if (!s->checked)
		stream_check_response(s);
	if (s->auth.refused) {
		size_t room = sizeof(s->auth.err_body) - s->auth.err_len;
		if (len > room)
			return CURL_WRITEFUNC_ERROR; /* no S3 error is that long */
		memcpy(s->auth.err_body + s->auth.err_len, data, len);
		s->auth.err_len += len;
		return len;
	}
	if (s->fatal || s->retryable)
		return CURL_WRITEFUNC_ERROR;
	atomic_fetch_add_explicit(&s->engine->stats->bytes, len, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->f->wire_bytes, len, memory_order_relaxed);
	if (s->f->speculative)
		atomic_fetch_add_explicit(&s->engine->stats->spec_bytes, len, memory_order_relaxed);
	s->received += len;
	if (s->skip > 0) {
		used = len < s->skip ? len : (size_t)s->skip;
		s->skip -= used;
	}
	if (used < len && s->pos < s->end && flight_is_compressed(s->f)) {
		size_t took = 0;
		rc = unframe_body(s, data + used, len - used, &took);
		used += took;
		if (rc)
			return CURL_WRITEFUNC_ERROR;
	} else if (used < len && s->pos < s->end) {
		size_t take = len - used;
		if (take > s->end - s->pos)
			take = (size_t)(s->end - s->pos);
		rc = stream_take_body(s, s->pos, data + used, take);
		if (rc) {
			stream_write_failed(s->engine, s->f, s, rc);
			return CURL_WRITEFUNC_ERROR;
		}
		atomic_fetch_add_explicit(&s->engine->stats->delivered_bytes, take,
		                          memory_order_relaxed);
		s->pos += take;
		used += take;
	}
	if (s->pos >= s->end) {
		/* Bytes past the object's size are a lie; past a split point they are expected. */
		if (used < len && s->end == s->f->size) {
			s->fatal = -EIO;
			stream_why(s, "upstream sent more than the expected %" PRIu64 " bytes",
			           stored_size(s->f));
			return CURL_WRITEFUNC_ERROR;
		}
		s->reached_end = true;
		return used == len ? len : CURL_WRITEFUNC_ERROR;
	}
	return len;
}

/* Why fetch_open_beneath refused an object, for the log. */
static const char *beneath_refusal(int err)
{
	switch (err) {
	case -ELOOP:
		return "a symlink on its path in the mirror's directory (none is followed)";
	case -EXDEV:
		return "its path leaves the mirror's directory";
	case -ENOENT:
		return "no such file in the mirror's directory";
	case -EINVAL:
		return "not a regular file beneath the mirror's directory";
	default:
		return strerror(-err);
	}
}

/*
 * The URL curl reads for f's current url into s, for a file: mirror's object the file
 * opened beneath the mirror's directory (beneath.h): curl gets that descriptor's
 * /proc/self/fd path, which reopens that very file, and applies ranges and resumes to it as
 * to any file: URL, so the body goes through the same checks, spool writes and hashing as
 * every other. (curl would decode the URL's path and follow symlinks itself.) A refusal
 * moves f to its next url, as a 404 would; with none left, -EIO.
 */
static int stream_url(struct engine *e, struct flight *f, struct stream *s, char **url)
{
	char fd_url[64];

	while (f->src.dir_fds[f->xfer.url_idx] >= 0) {
		unsigned idx = f->xfer.url_idx;
		char shown[512], why[200];
		int fd = fetch_open_beneath(f->src.dir_fds[idx], f->src.paths[idx]);
		if (fd >= 0) {
			s->obj_fd = fd;
			snprintf(fd_url, sizeof(fd_url), "file:///proc/self/fd/%d", fd);
			*url = strdup(fd_url);
			return *url ? 0 : -ENOMEM;
		}
		snprintf(why, sizeof(why), "refused: %s", beneath_refusal(fd));
		util_log(fd == -ENOENT ? UTIL_LOG_WARN : UTIL_LOG_ERROR, "%s: mirror %s: %s",
		         f->name, util_redact_url(f->src.urls[idx], shown, sizeof(shown)), why);
		if (!engine_try_other_mirror(e, f, idx, why))
			return -EIO;
	}
	*url = strdup(f->src.urls[f->xfer.url_idx]);
	return *url ? 0 : -ENOMEM;
}

int stream_start(struct engine *e, struct flight *f, uint64_t start, uint64_t end)
{
	struct stream *s = calloc(1, sizeof(*s));
	char range[64], header[300], *url = NULL;
	uint64_t stored_start, stored_end;
	int rc = -ENOMEM;

	if (!s)
		goto fail;
	s->obj_fd = -1;
	rc = stream_url(e, f, s, &url);
	if (rc)
		goto fail_stream;
	rc = -ENOMEM;
	s->engine = e;
	s->f = f;
	if (flight_is_compressed(f)) {
		/* Whole frames, asked for in stored bytes; what lies before start is not
		 * delivered (written already, or being written by another request). */
		s->z.drop_before = start;
		flight_frames_stored_range(f, &start, &end, &stored_start, &stored_end);
		s->z.frame = flight_frame_of(f, start);
		s->ranged = stored_start > 0 || stored_end < stored_size(f);
	} else {
		stored_start = start;
		stored_end = end;
		s->ranged = start > 0 || end < f->size;
	}
	s->pos = s->attempt_start = start;
	s->end = end;
	s->round = f->xfer.fail_round;
	http_response_reset(&s->resp);
	s->easy = curl_easy_init();
	if (!s->easy)
		goto fail_stream;
	s->url_idx = f->xfer.url_idx;
	curl_easy_setopt(s->easy, CURLOPT_URL, url); /* curl copies it */
	curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);

	curl_easy_setopt(s->easy, CURLOPT_PROTOCOLS_STR, "http,https,file");
	curl_easy_setopt(s->easy, CURLOPT_REDIR_PROTOCOLS_STR,
	                 http_redirect_protocols(f->src.urls[f->xfer.url_idx]));
	/* Not for signed requests: curl drops Authorization on a redirect to another host, but
	 * not the signer's other headers, a session token among them. */
	curl_easy_setopt(s->easy, CURLOPT_FOLLOWLOCATION, e->cfg.sign ? 0L : 1L);
	curl_easy_setopt(s->easy, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(s->easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(s->easy, CURLOPT_HEADERDATA, s);
	curl_easy_setopt(s->easy, CURLOPT_ERRORBUFFER, s->errbuf);
	curl_easy_setopt(s->easy, CURLOPT_BUFFERSIZE, CURL_BUFFER_BYTES);

	/* A stall is "no byte for stall_timeout_s", waiting for headers included. */
	s->clock.last_byte_ms = s->clock.started_ms = s->clock.window_ms = now_ms();
	s->clock.started_ns = util_monotonic_ns();
	curl_easy_setopt(s->easy, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(s->easy, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(s->easy, CURLOPT_XFERINFODATA, s);

	/*
	 * Over https, libcurl offers HTTP/2 (ALPN) and multiplexes on one connection. A burst of
	 * requests to a host not yet connected would each open a connection of its own before
	 * the first one's ALPN answer is in; waiting for it puts them all on that one when the
	 * server speaks h2, and costs one handshake's time when it does not.
	 */
	if (strncmp(url, "https:", 6) == 0)
		curl_easy_setopt(s->easy, CURLOPT_PIPEWAIT, 1L);
	/* Object keys may hold "./" or "../": the path is sent exactly as it was signed. */
	curl_easy_setopt(s->easy, CURLOPT_PATH_AS_IS, 1L);
	fetch_net_apply(s->easy, &e->cfg.net, &s->guard);
	if (s->ranged) {
		snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, stored_start,
		         stored_end - 1);
		curl_easy_setopt(s->easy, CURLOPT_RANGE, range);
	}
	/* Bytes as stored: a body compressed on the way would not be the object's. */
	s->headers = curl_slist_append(NULL, "Accept-Encoding: identity");
	if (!s->headers)
		goto fail_easy;
	/* Pin every later request to the version the first response showed us. */
	header[0] = '\0';
	if (http_etag_sendable(f->xfer.version.etag))
		snprintf(header, sizeof(header), "If-Match: %s", f->xfer.version.etag);
	else if (!f->xfer.version.etag[0] && f->xfer.version.last_modified[0])
		snprintf(header, sizeof(header), "If-Unmodified-Since: %s",
		         f->xfer.version.last_modified);
	if (header[0]) {
		struct curl_slist *more = curl_slist_append(s->headers, header);
		if (!more)
			goto fail_easy;
		s->headers = more;
	}
	if (e->cfg.sign) {
		rc = e->cfg.sign(e->cfg.sign_ctx, f->url, &s->headers, &s->auth.creds_gen);
		if (rc)
			goto fail_easy;
	}
	curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->headers);
	if (curl_multi_add_handle(e->multi, s->easy) != CURLM_OK) {
		rc = -EIO;
		goto fail_easy;
	}
	s->next = f->xfer.streams;
	f->xfer.streams = s;
	f->xfer.n_streams++;
	e->n_transfers++;
	if (flight_is_compressed(f))
		unframe_stream_reserve(s);
	atomic_fetch_add_explicit(&e->stats->requests, 1, memory_order_relaxed);
	util_log(UTIL_LOG_DEBUG, "%s: GET bytes=%" PRIu64 "-%" PRIu64, f->name, start, end - 1);
	free(url);
	return 0;
fail_easy:
	curl_slist_free_all(s->headers);
	curl_easy_cleanup(s->easy);
fail_stream:
	if (s->obj_fd >= 0)
		close(s->obj_fd);
	free(s);
fail:
	free(url);
	return rc;
}

/* What a finished transfer cost in connections, for the stats. */
static void count_connection(struct engine *e, const struct stream *s)
{
	long opened = 0, version = 0;

	if (curl_easy_getinfo(s->easy, CURLINFO_NUM_CONNECTS, &opened) == CURLE_OK && opened > 0)
		atomic_fetch_add_explicit(&e->stats->connections, (uint64_t)opened,
		                          memory_order_relaxed);
	if (s->checked && curl_easy_getinfo(s->easy, CURLINFO_HTTP_VERSION, &version) == CURLE_OK &&
	    version == CURL_HTTP_VERSION_2_0)
		atomic_fetch_add_explicit(&e->stats->http2_responses, 1, memory_order_relaxed);
}

void stream_free(struct engine *e, struct stream *s)
{
	struct stream **pp;

	/* Never true while the pending bytes are flushed after each perform and streams are
	 * freed outside it; kept so that breaking that rule loses no bytes and frees nothing
	 * still referenced. */
	if (e->pending.stream == s)
		(void)stream_flush_pending(e);
	/* Ended before its headers were looked at: no status to file it under. */
	if (!s->checked)
		util_histogram_set_observe(&e->stats->latency, 0,
		                           util_monotonic_ns() - s->clock.started_ns);
	for (pp = &s->f->xfer.streams; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	s->f->xfer.n_streams--;
	if (s->speculative)
		e->spec.n_running--;
	else
		e->n_transfers--;
	e->n_background -= s->background;
	count_connection(e, s);
	curl_multi_remove_handle(e->multi, s->easy);
	curl_easy_cleanup(s->easy);
	curl_slist_free_all(s->headers);
	if (s->obj_fd >= 0)
		close(s->obj_fd);
	unframe_stream_free(s);
	free(s);
}
