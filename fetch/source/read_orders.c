/*
 * read_orders.c checks a manifest's "read_orders" and takes out one order (read_orders.h),
 * with sqlite's JSON functions on a private in-memory connection, as manifest_load.c reads
 * the manifest's outer shape. Every order is checked, not only the one taken: the rule is
 * the field's, so a manifest's author learns of a bad order from any mount of it.
 */
#include "fetch/source/read_orders.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"

/* Each order's paths, in order: one row per path (a row with NULL path columns for an order
 * that is not an array or is empty), orders in the field's order. */
static const char orders_sql[] =
    "SELECT o.id, o.key, o.type, p.type, p.atom FROM json_each(:orders) AS o"
    " LEFT JOIN json_each(CASE WHEN o.type = 'array' THEN o.value ELSE '[]' END) AS p";

bool source_read_order_name_ok(const char *name, size_t len)
{
	if (len == 0 || len > READ_ORDER_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* A name for a message: at most 64 bytes, anything but printable ASCII shown as '?'. */
static void shown_name(char *buf, size_t cap, const char *name, size_t len)
{
	size_t n = len < cap - 1 ? len : cap - 1;

	for (size_t i = 0; i < n; i++)
		buf[i] = name[i] >= 0x20 && name[i] < 0x7f && name[i] != '"' ? name[i] : '?';
	buf[n] = '\0';
}

struct take {
	struct manifest_load_options *opts;
	FILE *out; /* the wanted order's lines */
	int64_t order_id;
	char name[READ_ORDER_NAME_MAX + 1];
	bool wanted; /* the order now read is the one asked for */
	bool found;
	size_t paths; /* of the order now read */
	unsigned orders;
};

__attribute__((format(printf, 2, 3))) static int refuse(struct take *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t->opts->read_order_why, sizeof(t->opts->read_order_why), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* The first row of an order: its name and type. 0 or -EINVAL. */
static int begin_order(struct take *t, sqlite3_stmt *st)
{
	const char *key = (const char *)sqlite3_column_text(st, 1);
	size_t len = (size_t)sqlite3_column_bytes(st, 1);
	const char *type = (const char *)sqlite3_column_text(st, 2);
	char shown[READ_ORDER_NAME_MAX + 1];

	t->order_id = sqlite3_column_int64(st, 0);
	t->paths = 0;
	if (++t->orders > READ_ORDERS_MAX)
		return refuse(t, "read_orders: more than %d orders", READ_ORDERS_MAX);
	if (!key || strlen(key) != len || !source_read_order_name_ok(key, len)) {
		shown_name(shown, sizeof(shown), key ? key : "", key ? len : 0);
		return refuse(
		    t, "read_orders[\"%s\"]: not an order's name (1 to %d of A-Z a-z 0-9 . _ -)",
		    shown, READ_ORDER_NAME_MAX);
	}
	memcpy(t->name, key, len + 1);
	if (!type || strcmp(type, "array") != 0)
		return refuse(t, "read_orders[\"%s\"]: not an array of paths", t->name);
	t->wanted = strcmp(t->name, t->opts->read_order_name) == 0;
	if (t->wanted && t->found)
		return refuse(t, "read_orders[\"%s\"]: named twice", t->name);
	t->found |= t->wanted;
	return 0;
}

/* One path of the order now read: checked, and kept when the order is the one asked for. */
static int take_path(struct take *t, sqlite3_stmt *st)
{
	const char *type = (const char *)sqlite3_column_text(st, 3);
	const char *path = (const char *)sqlite3_column_text(st, 4);
	size_t len = (size_t)sqlite3_column_bytes(st, 4), index = t->paths;
	char buf[128];
	const char *why;

	if (++t->paths > READ_ORDER_PATHS_MAX)
		return refuse(t, "read_orders[\"%s\"]: more than %d paths", t->name,
		              READ_ORDER_PATHS_MAX);
	if (!type || strcmp(type, "text") != 0 || !path)
		return refuse(t, "read_orders[\"%s\"][%zu]: not a string", t->name, index);
	why = strlen(path) != len ? "path holds a NUL byte"
	      : memchr(path, '\n', len) || memchr(path, '\r', len)
	          ? "path holds a line break"
	          : index_check_path(path, len, true, buf, sizeof(buf));
	if (why)
		return refuse(t, "read_orders[\"%s\"][%zu]: %s", t->name, index, why);
	if (t->wanted && (fwrite(path, 1, len, t->out) != len || fputc('\n', t->out) == EOF))
		return -ENOMEM;
	return 0;
}

static int walk_orders(struct take *t, const char *value)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int rc = -ENOMEM, step;

	if (sqlite3_open_v2(":memory:", &db,
	                    SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY | SQLITE_OPEN_NOMUTEX,
	                    NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, orders_sql, -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_bind_text(st, sqlite3_bind_parameter_index(st, ":orders"), value, -1,
	                      SQLITE_STATIC) != SQLITE_OK)
		goto out;
	rc = 0;
	t->order_id = -1;
	while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
		if (sqlite3_column_int64(st, 0) != t->order_id)
			rc = begin_order(t, st);
		if (rc == 0 && sqlite3_column_type(st, 3) != SQLITE_NULL)
			rc = take_path(t, st);
	}
	if (rc == 0 && step != SQLITE_DONE)
		rc = step == SQLITE_NOMEM ? -ENOMEM : refuse(t, "read_orders: not valid JSON");
out:
	sqlite3_finalize(st);
	sqlite3_close(db);
	return rc;
}

void source_read_orders_take(const char *type, const char *value,
                             struct manifest_load_options *opts)
{
	struct take t = {.opts = opts};
	char *lines = NULL;
	size_t size = 0;
	int rc;

	opts->read_order = NULL;
	opts->read_order_paths = 0;
	opts->read_order_why[0] = '\0';
	if (!opts->read_order_name)
		return;
	if (!type) {
		snprintf(opts->read_order_why, sizeof(opts->read_order_why),
		         "the manifest has no read orders");
		return;
	}
	if (strcmp(type, "object") != 0 || !value) {
		snprintf(opts->read_order_why, sizeof(opts->read_order_why),
		         "read_orders: not an object");
		return;
	}
	/* sqlite's JSON functions end a string at an escaped NUL: "a\u0000b" would be "a", a
	 * path the author did not write. Refused here (a path with a literal "\u0000" too). */
	if (strstr(value, "\\u0000")) {
		snprintf(opts->read_order_why, sizeof(opts->read_order_why),
		         "read_orders: a path holds a NUL byte (\\u0000)");
		return;
	}
	t.out = open_memstream(&lines, &size);
	rc = t.out ? walk_orders(&t, value) : -ENOMEM;
	if (t.out && fclose(t.out) != 0 && rc == 0)
		rc = -ENOMEM;
	if (rc == -ENOMEM)
		snprintf(opts->read_order_why, sizeof(opts->read_order_why),
		         "read_orders: out of memory");
	else if (rc == 0 && !t.found)
		snprintf(opts->read_order_why, sizeof(opts->read_order_why),
		         "the manifest has no read order named \"%s\"", opts->read_order_name);
	if (rc == 0 && t.found) {
		opts->read_order = lines;
		lines = NULL;
		for (size_t i = 0; i < size; i++)
			opts->read_order_paths += opts->read_order[i] == '\n';
	}
	free(lines);
}
