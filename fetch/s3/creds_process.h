/*
 * Runs a profile's credential_process, the way the AWS CLI does but without a shell: the
 * command line is split into words by wordexp(3) with command substitution refused
 * (WRDE_NOCMD: "$(...)" and backquotes are errors; quotes, backslashes, $VAR and ~ work as
 * in a shell), and the program is started with posix_spawnp (PATH is searched), stdin
 * /dev/null, stdout a pipe read up to CREDS_DOC_MAX bytes, stderr the daemon's, every other
 * descriptor closed. It must exit 0 within CREDS_PROCESS_TIMEOUT_S (else it is killed).
 *
 * Called by the credential chain at mount time and by the refresh thread, never under a lock.
 */
#ifndef SPOOLFS_FETCH_S3_CREDS_PROCESS_H
#define SPOOLFS_FETCH_S3_CREDS_PROCESS_H

#include <stddef.h>

#include "fetch/s3/s3_creds.h"

#define CREDS_PROCESS_TIMEOUT_S 60

/*
 * Runs `command` and parses its JSON (Version 1; Expiration optional: none means the
 * credentials never expire) into *out (origin NULL). 0 or -errno with one line in err that
 * names the program (argv[0]) but never its arguments or output: -EINVAL (a command line
 * that cannot be split, or output that is not the JSON), -ENOENT (no such program), -EIO
 * (it exited non-zero, or by a signal), -ETIMEDOUT, -EFBIG (too much output), -ENOMEM.
 */
int creds_process_run(const char *command, struct s3_creds *out, char *err, size_t err_len);

#endif
