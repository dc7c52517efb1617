/* ckptctl list: the checkpoints of a store, as a table or as JSON. */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct list_args {
	bool json;
};

static const struct cli_opt list_opts[] = {
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct list_args, json), NULL,
	 "print a JSON array of objects with step, time (unix seconds), tensors,\n"
	 "logical_bytes, new_bytes, stored_bytes, chunks and new_chunks")},
	CLI_OPT_END,
};

static int cmd_list(int argc, char **argv);

const struct cli_cmd ck_cmd_list = {
	.name = "list", .fn = cmd_list, .help = "list the checkpoints of a store",
	.args = "STORE", .opts = list_opts,
	.desc = "List the checkpoints of STORE in ascending step order: step, commit time (UTC), number of\n"
		"tensors, logical size (sum of tensor sizes), the bytes each checkpoint added to the store\n"
		"(NEW) and the on-disk bytes of every chunk it references, shared ones included (STORED).\n"
		"Sizes are in IEC units (KiB, MiB, GiB). A damaged manifest is reported on standard error\n"
		"and not listed. The store is opened read-only: listing works while a save runs.\n"
		"When the store holds a multi-rank checkpoint, a RANKS column gives each one's world size.\n",
	.tail = "\n"
		"Exit status: 0 listed (even with damaged manifests); 1 failed; 2 usage error; 4 no such\n"
		"store.\n"
		"\n"
		"Example:\n"
		"  ckptctl list /mnt/nvme/ckpt\n",
};

static int cmd_list(int argc, char **argv)
{
	const char *cmd = "list";
	struct list_args opt = {0};
	ckpt_store *store;
	int rc = ck_parse_open(&ck_cmd_list, &opt, &argc, &argv, true, &store);
	if (rc >= 0)
		return rc;
	bool json = opt.json;
	rc = 0;
	ckpt_info *list = NULL;
	int n = ckpt_store_list(store, 1, &list);
	if (n < 0) {
		rc = ck_fail(cmd, n, "cannot list the store");
		ckpt_store_close(store);
		return rc;
	}
	for (int k = 0; k < n; k++) {
		if (!list[k].error)
			continue;
		char why[1024];
		cli_err("warning: step %llu: %s", (unsigned long long)list[k].step,
			ck_invalid_reason(store, &list[k], why, sizeof why));
	}
	unsigned *worlds = ck_dist_list_worlds(store, list, n);
	if (json) {
		struct jw w;
		jw_init(&w, stdout, true);
		jw_arr_begin(&w);
		for (int k = 0; k < n; k++) {
			const ckpt_info *i = &list[k];
			if (i->error)
				continue;
			jw_obj_begin(&w);
			jw_key(&w, "step"); jw_u64(&w, i->step);
			jw_key(&w, "time"); jw_i64(&w, i->time);
			jw_key(&w, "tensors"); jw_u64(&w, i->tensors);
			jw_key(&w, "logical_bytes"); jw_u64(&w, i->logical_bytes);
			jw_key(&w, "new_bytes"); jw_u64(&w, i->new_bytes);
			jw_key(&w, "stored_bytes"); jw_u64(&w, i->stored_bytes);
			jw_key(&w, "chunks"); jw_u64(&w, i->chunks);
			jw_key(&w, "new_chunks"); jw_u64(&w, i->new_chunks);
			ck_dist_list_json(&w, worlds, k);
			jw_obj_end(&w);
		}
		jw_arr_end(&w);
		jw_finish(&w);
	} else {
		printf("%12s  %-19s  %8s  %12s  %12s  %12s", "STEP", "TIME (UTC)", "TENSORS",
		       "LOGICAL", "NEW", "STORED");
		ck_dist_list_col(worlds, -1);
		putchar('\n');
		for (int k = 0; k < n; k++) {
			const ckpt_info *i = &list[k];
			char t[32], a[32], b[32], d[32];
			if (i->error)
				continue;
			printf("%12llu  %-19s  %8llu  %12s  %12s  %12s", (unsigned long long)i->step,
			       cli_fmt_time(i->time, t, sizeof t), (unsigned long long)i->tensors,
			       cli_fmt_iec(i->logical_bytes, a, sizeof a),
			       cli_fmt_iec(i->new_bytes, b, sizeof b),
			       cli_fmt_iec(i->stored_bytes, d, sizeof d));
			ck_dist_list_col(worlds, k);
			putchar('\n');
		}
	}
	if (fflush(stdout) || ferror(stdout)) {
		cli_err("%s: write error on standard output", cmd);
		rc = EXIT_FAIL;
	}
	free(worlds);
	ckpt_info_free(list);
	ckpt_store_close(store);
	return rc;
}
