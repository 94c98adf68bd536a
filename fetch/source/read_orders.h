/*
 * A manifest's read orders (doc/manifest.md, "read_orders"): named lists of paths, in the
 * order earlier runs of a job first opened them, that a mount fetches ahead from mount
 * time. This file checks the field and takes out the one order a mount asked for, as the
 * lines a prefetch list holds (fetch/prefetch/reads.h), so the list machinery runs it.
 *
 * The field is optional and additive: a manifest without it, or with a bad one, mounts the
 * same tree; a bad one only loses its prefetch, and the reason is returned for the log. It
 * is bounded before anything is kept: a hostile manifest cannot make the mount hold more
 * than one order of at most READ_ORDER_PATHS_MAX checked paths.
 */
#ifndef SPOOLFS_FETCH_SOURCE_READ_ORDERS_H
#define SPOOLFS_FETCH_SOURCE_READ_ORDERS_H

#include <stdbool.h>
#include <stddef.h>

#include "fetch/source/manifest_load.h"

#define READ_ORDERS_MAX 64
#define READ_ORDER_PATHS_MAX 1000000
#define READ_ORDER_NAME_MAX 64
#define READ_ORDER_DEFAULT "default"

/* Whether name (len bytes) may name an order: 1 to 64 of [A-Za-z0-9._-]. */
bool source_read_order_name_ok(const char *name, size_t len);

/*
 * Checks a root manifest's "read_orders" (type: its JSON type as sqlite's json_type names
 * it, value: its text; both NULL when the manifest has none) and takes the order named
 * opts->read_order_name into opts->read_order (its paths, each ending in '\n'; malloc'd)
 * and opts->read_order_paths. A bad field, or no order of that name, sets
 * opts->read_order_why instead and takes nothing. Never fails the load.
 */
void source_read_orders_take(const char *type, const char *value,
                             struct manifest_load_options *opts);

#endif
