/* The persist phase of a multi-rank save (dsave.c walks them all): the pipeline hashes, writes
 * and makes durable the part's chunks, and its manifest becomes STORE/parts/<step>/<rank>.part;
 * then the part is described (size and trailer checksum) for the commit's exchange. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist_save.h"
#include "format/format.h"
#include "io/io.h"
#include "save/save.h"
#include "store/store.h"

/* Waits until this rank's part is durable (kill point 2) and describes it in *m (rc, size,
 * trailer checksum); rc is submit's failure, or 0. */
void dist_persist_part(dsave *d, int rc, ckpt_stats *st, struct part_msg *m)
{
	if (d->part)
		rc = save1_wait(d->part, st);
	d->part = NULL;
	dist_kill_point(d->comm.rank);
	char p[4096];
	dist_part_path(d->s, d->step, d->comm.rank, p, sizeof p);
	uint8_t *buf = NULL;
	size_t len = 0;
	if (!rc)
		rc = io_slurp(p, MF_MAX_LEN, &buf, &len);
	if (!rc && len < 16)
		rc = ckpt_fail(CKPT_E_CORRUPT, "part %s is truncated", p);
	m->rc = rc;
	if (rc)
		snprintf(m->msg, sizeof m->msg, "%s", ckpt_errmsg());
	else {
		m->size = len;
		memcpy(m->digest, buf + len - 16, 16);
	}
	free(buf);
}

/* Bytes of the part hashed so far; the commit thread of a threaded save owns (and frees) the
 * part, so only an unthreaded one is asked. */
int dsave_progress(const dsave *d, uint64_t *done)
{
	if (!d || dist_threaded(dist_state(d, NULL)) || !d->part)
		return ckpt_fail(CKPT_E_UNSUPPORTED, "distributed save: no progress count here");
	return save1_progress(d->part, done);
}
