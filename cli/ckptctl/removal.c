/* What ckptctl delete and prune share: the check of their --gc options (ck_removal_check), the
 * run under the store's writer lock from listing to answer (ck_removal_run, with the command's
 * own steps in struct ck_removal_ops) and the JSON answer (ck_removal_json). Their option table
 * entries are CK_REMOVAL_OPTS in ckptctl.h. */
#include "ckptctl.h"

#include <stdio.h>

int ck_removal_check(const char *cmd, struct ck_removal *rm)
{
	if (!rm->gc && (rm->g.have_max_unused || rm->g.have_compact_below))
		return cli_usage_err(cmd, "--max-unused and --compact-below need --gc");
	ck_gc_finish(&rm->g);
	return -1;
}

int ck_removal_run(const char *cmd, const char *path, const struct ck_removal *rm,
		   const struct ck_removal_ops *ops, void *arg)
{
	ckpt_store *store;
	int rc = ck_open_for_gc(cmd, path, &rm->g, &store);
	if (rc)
		return rc;
	ckpt_info *list = NULL;
	ckpt_report *rep = NULL;
	int n = ckpt_store_list(store, 0, &list);
	if (n < 0) {
		rc = ck_fail(cmd, n, "cannot list the store");
		goto out;
	}
	if ((ops->prepare && (rc = ops->prepare(cmd, path, list, n, arg))) ||
	    (rc = ck_check_damaged(cmd, store, path, rm->force)))
		goto out;
	int flags = (rm->dry ? CKPT_GC_DRY_RUN : 0) | (rm->force ? CKPT_GC_FORCE : 0);
	if ((rc = ops->remove(cmd, store, rm->gc ? &rm->g.pol : NULL, flags, arg, &rep)))
		goto out;
	if (rm->json)
		ck_removal_json(rm->dry, rm->gc ? &rm->g : NULL, rep, list, n);
	else
		ops->print_text(rm->dry, rep, list, n, arg);
	rc = ck_stdout_done(cmd);
out:
	ckpt_report_free(rep);
	ckpt_info_free(list);
	ckpt_store_close(store);
	return rc;
}

bool ck_step_removed(const ckpt_report *r, uint64_t step)
{
	for (size_t k = 0; k < r->n_steps_removed; k++)
		if (r->steps_removed[k] == step)
			return true;
	return false;
}

void ck_removal_json(bool dry, const struct ck_gc_opts *gc, const ckpt_report *rep,
		     const ckpt_info *list, int n)
{
	struct jw w;
	jw_init(&w, stdout, true);
	jw_obj_begin(&w);
	jw_key(&w, "dry_run"); jw_bool(&w, dry);
	jw_key(&w, "removed");
	jw_arr_begin(&w);
	for (size_t k = 0; k < rep->n_steps_removed; k++)
		jw_u64(&w, rep->steps_removed[k]);
	jw_arr_end(&w);
	jw_key(&w, "kept");
	jw_arr_begin(&w);
	for (int k = 0; k < n; k++)
		if (!ck_step_removed(rep, list[k].step))
			jw_u64(&w, list[k].step);
	jw_arr_end(&w);
	if (gc) {
		jw_key(&w, "gc"); jw_bool(&w, true);
		ck_gc_json(&w, gc);
	}
	ck_report_json(&w, rep);
	jw_obj_end(&w);
	jw_finish(&w);
}
