/* Space accounting (ckpt_store_du): per checkpoint the bytes it references, alone or shared with
 * others; per store the packs, their live and dead bytes and the leftovers gc would remove. */
#include <stdlib.h>

#include "common/common.h"
#include "dist/dist.h"
#include "gc/gc_int.h"
#include "store/store.h"

CKPT_API int ckpt_store_du(ckpt_store *s, ckpt_du **out)
{
	*out = NULL;
	struct mfset ms;
	int rc = gc_mfset_load(s, &ms);
	if (rc)
		return rc;
	struct pk *pv = NULL;
	struct loc *lv = NULL;
	size_t np = 0, nl = 0;
	ckpt_du *du = calloc(1, sizeof *du);
	if (!du) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	du->entries = calloc(ms.n + 1, sizeof *du->entries);
	if (!du->entries) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	if ((rc = gc_list_packs(s, &pv, &np, NULL)) || (rc = gc_collect_locs(&ms, NULL, &lv, &nl)))
		goto out;
	gc_mark_live(pv, np, lv, nl);
	/* Per checkpoint: a location referenced by one manifest only is exclusive to it. */
	size_t *slot = calloc(ms.n + 1, sizeof *slot);
	if (!slot) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ms.n; i++) {
		if (ms.err[i])
			continue;
		slot[i] = du->n;
		du->entries[du->n++].step = ms.steps[i];
		du->manifest_bytes += ms.size[i];
	}
	for (size_t i = 0; i < nl;) {
		size_t j = i;
		while (j < nl && lv[j].pack == lv[i].pack && lv[j].offset == lv[i].offset)
			j++;
		for (size_t k = i; k < j; k++) {
			ckpt_du_entry *e = &du->entries[slot[lv[k].mf]];
			e->referenced_bytes += lv[k].span;
			if (j - i == 1)
				e->exclusive_bytes += lv[k].span;
			else
				e->shared_bytes += lv[k].span;
		}
		i = j;
	}
	free(slot);
	du->invalid_manifests = ms.ninvalid;
	for (size_t i = 0; i < np; i++) {
		du->packs++;
		du->pack_bytes += pv[i].size;
		if (pv[i].live || ms.ninvalid) {
			/* With damaged manifests, nothing is known to be garbage. */
			uint64_t live = ms.ninvalid ? pv[i].size : MIN(pv[i].size, pv[i].live + PACK_HDR_LEN);
			du->live_bytes += live;
			du->dead_record_bytes += pv[i].size - live;
		} else {
			du->unreferenced_pack_bytes += pv[i].size;
		}
	}
	uint64_t cnt = 0;
	du->leftover_bytes = gc_leftovers(s, false, NULL, 0, &cnt, NULL);
	du->part_bytes = dist_part_live(s, &du->parts);
	du->garbage_bytes = du->unreferenced_pack_bytes + du->dead_record_bytes + du->leftover_bytes;
	*out = du;
	du = NULL;
out:
	ckpt_du_free(du);
	free(pv);
	free(lv);
	gc_mfset_free(&ms);
	return rc;
}

CKPT_API void ckpt_du_free(ckpt_du *du)
{
	if (!du)
		return;
	free(du->entries);
	free(du);
}
