/*
 * Whether OUT_DIR can be written into by path: `spoolfs publish` (often root) writes its
 * objects and manifest by names under OUT_DIR, so anyone who could rename or plant an entry
 * on that path (OUT_DIR or objects/ swapped for a symlink, a directory of theirs) would
 * choose where root writes. The rule is sshd's StrictModes, as the cache directory has it
 * (util/trusted_path.h): OUT_DIR, objects/ and every directory above them owned by
 * root or by us, none writable by group or others unless sticky. Inside a trusted
 * objects/, only we (or root) make names, so objects/XX need no check of their own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/trusted_path.h"
#include "publish/publish_i.h"

/* One path's check; ENOENT is no fault when missing is (objects/ is made later, by us). */
static int trusted(const char *path, bool missing_ok)
{
	char why[512], quoted[2048];
	int rc = util_path_trusted(path, UTIL_TRUST_NO_SYMLINKS, why, sizeof(why));

	if (rc == -ENOENT && missing_ok)
		return 0;
	if (rc == -ENOMEM)
		return rc;
	if (rc)
		fprintf(stderr,
		        "spoolfs publish: OUT_DIR refused: %s (others could change where objects"
		        " are written)\n",
		        pub_quote(why, false, quoted, sizeof(quoted)));
	return rc;
}

int pub_out_trusted(const char *out_real)
{
	char *objects = NULL;
	int rc = trusted(out_real, false);

	if (rc)
		return rc;
	if (asprintf(&objects, "%s/objects", out_real) < 0)
		return -ENOMEM;
	rc = trusted(objects, true);
	free(objects);
	return rc;
}
