/* Helpers of the store-inspection commands (show, diff, du, prune, gc): shapes and tensor names
 * for tables, checkpoint readers with the CLI's error handling. */
#include "ckptctl.h"
#include "safetensors.h"

#include <stdio.h>
#include <string.h>

const char *ck_fmt_shape(unsigned ndim, const uint64_t *shape, char *buf, size_t len)
{
	size_t at = 0;
	at += (size_t)snprintf(buf, len, "[");
	for (unsigned d = 0; d < ndim && at < len; d++)
		at += (size_t)snprintf(buf + at, len - at, "%s%llu", d ? "," : "",
				       (unsigned long long)shape[d]);
	if (at < len)
		snprintf(buf + at, len - at, "]");
	return buf;
}

const char *ck_name(const char *name, char *buf, size_t len)
{
	/* Plain names print as they are; anything a terminal or a column could misread (spaces,
	 * quotes, backslashes, control characters, an empty name) is quoted and escaped. */
	bool plain = *name != '\0';
	for (const unsigned char *p = (const unsigned char *)name; *p && plain; p++)
		plain = *p > 0x20 && *p != 0x7f && *p != '"' && *p != '\\';
	if (plain && strlen(name) < len && strlen(name) <= 200) {
		memcpy(buf, name, strlen(name) + 1);
		return buf;
	}
	return st_quote(name, buf, len, 200);
}

int ck_open_reader(const char *cmd, ckpt_store *store, uint64_t step, ckpt_reader **out)
{
	int r = ckpt_reader_open(store, step, CKPT_READ_AS_SAVED, out);
	if (r == 0)
		return 0;
	*out = NULL;
	char what[64];
	if (step == CKPT_STEP_LATEST)
		snprintf(what, sizeof what, "no checkpoint in the store");
	else
		snprintf(what, sizeof what, "step %llu", (unsigned long long)step);
	return ck_fail(cmd, r, what);
}

int ck_stdout_done(const char *cmd)
{
	if (fflush(stdout) || ferror(stdout)) {
		cli_err("%s: write error on standard output", cmd);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

int ck_check_damaged(const char *cmd, ckpt_store *store, const char *path, bool force)
{
	ckpt_info *list = NULL;
	int n = ckpt_store_list(store, 1, &list);
	if (n < 0)
		return ck_fail(cmd, n, "cannot list the store");
	int bad = 0;
	for (int k = 0; k < n; k++) {
		if (!list[k].error)
			continue;
		char why[1024];
		bad++;
		cli_err("%s: %sdamaged manifest of step %llu: %s", cmd, force ? "warning: " : "",
			(unsigned long long)list[k].step, ck_invalid_reason(store, &list[k], why, sizeof why));
	}
	ckpt_info_free(list);
	if (!bad)
		return 0;
	if (force) {
		cli_err("%s: warning: --force: chunks that only the damaged manifest%s reference%s may "
			"be removed", cmd, bad == 1 ? "" : "s", bad == 1 ? "s" : "");
		return 0;
	}
	cli_err("%s: refusing to change %s while %d manifest%s %s damaged: nothing was removed (run "
		"'ckptctl verify %s --all'; --force proceeds anyway)", cmd, path, bad, bad == 1 ? "" : "s",
		bad == 1 ? "is" : "are", path);
	return EXIT_FAIL;
}

void ck_report_json(struct jw *w, const ckpt_report *r)
{
	jw_key(w, "packs_removed"); jw_u64(w, r->packs_removed);
	jw_key(w, "packs_compacted"); jw_u64(w, r->packs_compacted);
	jw_key(w, "manifests_rewritten"); jw_u64(w, r->manifests_rewritten);
	jw_key(w, "leftovers_removed"); jw_u64(w, r->leftovers_removed);
	jw_key(w, "bytes_freed"); jw_u64(w, r->bytes_freed);
	jw_key(w, "bytes_copied"); jw_u64(w, r->bytes_copied);
	if (r->files_left_alone) { /* only then, so that the usual output stays as it was */
		jw_key(w, "files_left_alone"); jw_u64(w, r->files_left_alone);
	}
	if (r->packs_deferred) {
		jw_key(w, "packs_deferred"); jw_u64(w, r->packs_deferred);
		jw_key(w, "reader"); jw_str(w, r->reader ? r->reader : "");
	}
	if (r->parts_removed) { /* of leftovers_removed: multi-rank checkpoints' parts */
		jw_key(w, "parts_removed"); jw_u64(w, r->parts_removed);
	}
	if (r->packs_spared || r->in_flight) { /* a save in flight on a node-local lock */
		jw_key(w, "packs_spared"); jw_u64(w, r->packs_spared);
		jw_key(w, "in_flight"); jw_str(w, r->in_flight ? r->in_flight : "");
	}
}

static const char *plural(uint64_t n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

void ck_report_text(const ckpt_report *r, bool dry)
{
	char a[32];
	if (r->packs_removed || r->leftovers_removed)
		printf("%s %llu unreferenced pack%s and %llu leftover file%s of interrupted saves\n",
		       dry ? "would remove" : "removed", (unsigned long long)r->packs_removed,
		       plural(r->packs_removed, "", "s"), (unsigned long long)r->leftovers_removed,
		       plural(r->leftovers_removed, "", "s"));
	if (r->parts_removed)
		printf("  of them %llu part file%s of multi-rank checkpoints (STORE/parts/)\n",
		       (unsigned long long)r->parts_removed, plural(r->parts_removed, "", "s"));
	if (r->packs_compacted && dry)
		printf("would compact %llu pack%s (%s of live records to copy), rewrite %llu "
		       "manifest%s\n",
		       (unsigned long long)r->packs_compacted, plural(r->packs_compacted, "", "s"),
		       cli_fmt_iec(r->bytes_copied, a, sizeof a),
		       (unsigned long long)r->manifests_rewritten,
		       plural(r->manifests_rewritten, "", "s"));
	else if (r->packs_compacted)
		printf("compacted %llu pack%s (%s of live records copied), rewrote %llu manifest%s\n",
		       (unsigned long long)r->packs_compacted, plural(r->packs_compacted, "", "s"),
		       cli_fmt_iec(r->bytes_copied, a, sizeof a),
		       (unsigned long long)r->manifests_rewritten,
		       plural(r->manifests_rewritten, "", "s"));
	if (r->packs_deferred)
		printf("deferred %llu pack%s that open readers may still read: %s (a later gc "
		       "removes %s)\n", (unsigned long long)r->packs_deferred,
		       plural(r->packs_deferred, "", "s"), r->reader ? r->reader : "?",
		       plural(r->packs_deferred, "it", "them"));
	if (r->packs_spared || r->in_flight)
		printf("spared %llu unreferenced pack%s, leftovers and compaction: a save is in "
		       "flight, %s (a later gc collects them)\n",
		       (unsigned long long)r->packs_spared, plural(r->packs_spared, "", "s"),
		       r->in_flight ? r->in_flight : "?");
	if (r->files_left_alone)
		printf("left alone %llu file%s in the pack directories that %s not this store's "
		       "pack%s (first: %s)\n", (unsigned long long)r->files_left_alone,
		       plural(r->files_left_alone, "", "s"), plural(r->files_left_alone, "is", "are"),
		       plural(r->files_left_alone, "", "s"), r->left_alone ? r->left_alone : "?");
	printf("%s: %s (%llu bytes)\n", dry ? "would free" : "freed",
	       cli_fmt_iec(r->bytes_freed, a, sizeof a), (unsigned long long)r->bytes_freed);
}
