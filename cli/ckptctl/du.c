/* ckptctl du: space per checkpoint (referenced, exclusive, shared) and the store's reclaimable
 * garbage, from ckpt_store_du(). */
#include "ckptctl.h"

#include <stdio.h>
#include <string.h>

struct du_args {
	bool json;
};

static const struct cli_opt du_opts[] = {
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct du_args, json), NULL,
	 "print a JSON object: checkpoints (step, referenced_bytes, exclusive_bytes,\n"
	 "shared_bytes), invalid_manifests, packs, pack_bytes, live_bytes,\n"
	 "garbage_bytes, unreferenced_pack_bytes, dead_record_bytes, leftover_bytes\n"
	 "and manifest_bytes; sizes in bytes")},
	CLI_OPT_END,
};

static int cmd_du(int argc, char **argv);

const struct cli_cmd ck_cmd_du = {
	.name = "du", .fn = cmd_du, .help = "space per checkpoint, shared and exclusive, and garbage",
	.args = "STORE", .opts = du_opts,
	.desc = "Show the disk space of STORE: for each checkpoint, the bytes of every chunk it references\n"
		"(REFERENCED), of them those no other checkpoint references (EXCLUSIVE: what removing it\n"
		"alone would free) and those shared with others (SHARED); then the pack files, their live\n"
		"bytes and the reclaimable garbage (packs no checkpoint references, dead records inside\n"
		"live packs, leftovers of interrupted saves) that 'ckptctl gc' removes. While a manifest is\n"
		"damaged nothing in the packs counts as garbage. Sizes are in IEC units. The store is\n"
		"opened read-only.\n"
		"The parts of multi-rank checkpoints (parts/STEP/RANK.part) are counted on a line of\n"
		"their own.\n",
	.tail = "\n"
		"Exit status: 0 shown; 1 failed; 2 usage error; 4 no such store.\n"
		"\n"
		"Example:\n"
		"  ckptctl du /mnt/nvme/ckpt\n",
};

static int cmd_du(int argc, char **argv)
{
	const char *cmd = "du";
	struct du_args opt = {0};
	ckpt_store *store;
	int rc = ck_parse_open(&ck_cmd_du, &opt, &argc, &argv, true, &store);
	if (rc >= 0)
		return rc;
	bool json = opt.json;
	rc = 0;
	ckpt_du *du = NULL;
	int r = ckpt_store_du(store, &du);
	if (r < 0) {
		rc = ck_fail(cmd, r, "cannot compute the space of the store");
		ckpt_store_close(store);
		return rc;
	}
	if (du->invalid_manifests) {
		/* As list does: name each damaged manifest and what is wrong with it. */
		ckpt_info *list = NULL;
		int nl = ckpt_store_list(store, 1, &list);
		for (int k = 0; k < nl; k++) {
			char why[1024];
			if (list[k].error)
				cli_err("warning: step %llu: %s", (unsigned long long)list[k].step,
					ck_invalid_reason(store, &list[k], why, sizeof why));
		}
		ckpt_info_free(list);
	}
	if (json) {
		struct jw w;
		jw_init(&w, stdout, true);
		jw_obj_begin(&w);
		jw_key(&w, "checkpoints");
		jw_arr_begin(&w);
		for (size_t k = 0; k < du->n; k++) {
			const ckpt_du_entry *e = &du->entries[k];
			jw_obj_begin(&w);
			jw_key(&w, "step"); jw_u64(&w, e->step);
			jw_key(&w, "referenced_bytes"); jw_u64(&w, e->referenced_bytes);
			jw_key(&w, "exclusive_bytes"); jw_u64(&w, e->exclusive_bytes);
			jw_key(&w, "shared_bytes"); jw_u64(&w, e->shared_bytes);
			jw_obj_end(&w);
		}
		jw_arr_end(&w);
		jw_key(&w, "invalid_manifests"); jw_u64(&w, du->invalid_manifests);
		jw_key(&w, "packs"); jw_u64(&w, du->packs);
		jw_key(&w, "pack_bytes"); jw_u64(&w, du->pack_bytes);
		jw_key(&w, "live_bytes"); jw_u64(&w, du->live_bytes);
		jw_key(&w, "garbage_bytes"); jw_u64(&w, du->garbage_bytes);
		jw_key(&w, "unreferenced_pack_bytes"); jw_u64(&w, du->unreferenced_pack_bytes);
		jw_key(&w, "dead_record_bytes"); jw_u64(&w, du->dead_record_bytes);
		jw_key(&w, "leftover_bytes"); jw_u64(&w, du->leftover_bytes);
		jw_key(&w, "manifest_bytes"); jw_u64(&w, du->manifest_bytes);
		ck_dist_du_json(&w, du);
		jw_obj_end(&w);
		jw_finish(&w);
	} else {
		char a[32], b[32], d[32];
		printf("%12s  %12s  %12s  %12s\n", "STEP", "REFERENCED", "EXCLUSIVE", "SHARED");
		for (size_t k = 0; k < du->n; k++) {
			const ckpt_du_entry *e = &du->entries[k];
			printf("%12llu  %12s  %12s  %12s\n", (unsigned long long)e->step,
			       cli_fmt_iec(e->referenced_bytes, a, sizeof a),
			       cli_fmt_iec(e->exclusive_bytes, b, sizeof b),
			       cli_fmt_iec(e->shared_bytes, d, sizeof d));
		}
		printf("\n");
		printf("checkpoints:      %zu (manifests %s)\n", du->n,
		       cli_fmt_iec(du->manifest_bytes, a, sizeof a));
		ck_dist_du_text(du);
		printf("packs:            %llu files, %s\n", (unsigned long long)du->packs,
		       cli_fmt_iec(du->pack_bytes, a, sizeof a));
		printf("live:             %s\n", cli_fmt_iec(du->live_bytes, a, sizeof a));
		printf("garbage:          %s reclaimable\n", cli_fmt_iec(du->garbage_bytes, a, sizeof a));
		printf("  unreferenced packs:  %s\n",
		       cli_fmt_iec(du->unreferenced_pack_bytes, a, sizeof a));
		printf("  dead records:        %s\n", cli_fmt_iec(du->dead_record_bytes, a, sizeof a));
		printf("  leftovers:           %s\n", cli_fmt_iec(du->leftover_bytes, a, sizeof a));
		if (du->invalid_manifests)
			printf("damaged manifests: %zu (their chunks count as live; run 'ckptctl verify "
			       "--all')\n", du->invalid_manifests);
	}
	rc = ck_stdout_done(cmd);
	ckpt_du_free(du);
	ckpt_store_close(store);
	return rc;
}
