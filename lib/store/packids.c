/* STORE/packids (docs/format.md): per pack id range, the highest id a pack of this store ever had
 * that may be gone now. A remote copy of the store names its pack objects by id, and a push skips
 * a pack the remote holds under the same id; so an id, once used, must never name another pack.
 * gc raises the marks before it removes any pack, and binding a fresh store to a remote
 * (ckpt_remote_adopt) raises them to the remote's ids; writers allocate above them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "io/io.h"
#include "store/store.h"

#define PACKIDS_MAX_LEN 65536 /* 1024 ranges of at most 22 bytes a line, and room */

/* Parses the file's text into marks[] (zeroed first): lines "R N" (range, highest id), R
 * ascending, N inside range R. Returns 0 or -CKPT_E_CORRUPT naming path. */
static int parse(const char *path, const char *p, size_t len, uint32_t *marks)
{
	memset(marks, 0, STORE_PACK_RANGES * sizeof *marks);
	const char *end = p + len;
	long last = -1;
	while (p < end) {
		char *e;
		errno = 0;
		unsigned long r = strtoul(p, &e, 10);
		bool ok = e > p && *p >= '0' && *p <= '9' && e < end && *e == ' ' && !errno;
		unsigned long id = ok ? strtoul(p = e + 1, &e, 10) : 0;
		ok = ok && e > p && *p >= '0' && *p <= '9' && e < end && *e == '\n' && !errno &&
		     r < STORE_PACK_RANGES && (long)r > last && id <= UINT32_MAX &&
		     id >> STORE_PACK_RANGE_BITS == r;
		if (!ok)
			return ckpt_fail(CKPT_E_CORRUPT, "%s: line %ld is not \"RANGE ID\" (ranges "
					 "ascending, each id inside its range)", path, last + 2);
		marks[r] = (uint32_t)id;
		last = (long)r;
		p = e + 1;
	}
	return 0;
}

/* Reads the marks of the store in directory dir (all zero when the file is absent). */
static int load(const char *dir, uint32_t *marks)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/" STORE_PACKIDS, dir);
	uint8_t *buf;
	size_t len;
	int rc = io_slurp(path, PACKIDS_MAX_LEN, &buf, &len);
	if (rc == -CKPT_E_NOTFOUND) {
		memset(marks, 0, STORE_PACK_RANGES * sizeof *marks);
		return 0;
	}
	if (rc)
		return rc;
	rc = parse(path, (const char *)buf, len, marks);
	free(buf);
	return rc;
}

int store_packid_mark(const char *dir, uint32_t range, uint32_t *mark)
{
	uint32_t *marks = malloc(STORE_PACK_RANGES * sizeof *marks);
	if (!marks)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	int rc = load(dir, marks);
	*mark = rc || range >= STORE_PACK_RANGES ? 0 : marks[range];
	free(marks);
	return rc;
}

int store_packids_raise(const char *dir, const uint32_t *ids, size_t n)
{
	uint32_t *marks = malloc(STORE_PACK_RANGES * sizeof *marks);
	char *text = malloc(PACKIDS_MAX_LEN);
	int rc = marks && text ? load(dir, marks) : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	bool changed = false;
	for (size_t i = 0; !rc && i < n; i++) {
		uint32_t *m = &marks[ids[i] >> STORE_PACK_RANGE_BITS];
		if (ids[i] > *m) {
			*m = ids[i];
			changed = true;
		}
	}
	size_t len = 0;
	for (uint32_t r = 0; !rc && changed && r < STORE_PACK_RANGES; r++)
		if (marks[r])
			len += (size_t)snprintf(text + len, PACKIDS_MAX_LEN - len, "%u %u\n", r,
						marks[r]);
	if (!rc && changed)
		rc = io_write_atomic(dir, STORE_PACKIDS, text, len, NULL);
	free(marks);
	free(text);
	return rc;
}
