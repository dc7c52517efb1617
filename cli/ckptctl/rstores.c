/* The remote seen from a node without a store: `ckptctl list --remote URL` lists the stores the
 * remote holds (what `pull --store-id` takes); and what push adds for a node's first copies: a
 * directory remote made on first use, `push --all`. */
#include "ckptctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The stores of url, as a table or a JSON array, on f. */
static void stores_print(FILE *f, const char *url, const ckpt_remote_store *v, long n, bool json)
{
	if (json) {
		struct jw w;
		jw_init(&w, f, true);
		jw_arr_begin(&w);
		for (long k = 0; k < n; k++) {
			jw_obj_begin(&w);
			jw_key(&w, "store_id"); jw_str(&w, v[k].id);
			jw_key(&w, "host"); jw_str(&w, v[k].host);
			jw_key(&w, "path"); jw_str(&w, v[k].path);
			jw_key(&w, "checkpoints"); jw_u64(&w, v[k].checkpoints);
			jw_key(&w, "newest_step");
			if (v[k].checkpoints)
				jw_u64(&w, v[k].newest_step);
			else
				jw_null(&w);
			jw_key(&w, "bytes"); jw_u64(&w, v[k].bytes);
			jw_obj_end(&w);
		}
		jw_arr_end(&w);
		jw_finish(&w);
		return;
	}
	int hw = 4;
	for (long k = 0; k < n; k++)
		if ((int)strlen(v[k].host) > hw)
			hw = (int)strlen(v[k].host);
	if (n)
		fprintf(f, "%-32s  %-*s  %12s  %11s  %10s  %s\n", "STORE ID", hw, "HOST", "NEWEST",
			"CHECKPOINTS", "SIZE", "PATH");
	for (long k = 0; k < n; k++) {
		char newest[32], size[32];
		snprintf(newest, sizeof newest, "%llu", (unsigned long long)v[k].newest_step);
		fprintf(f, "%-32s  %-*s  %12s  %11llu  %10s  %s\n", v[k].id, hw,
			*v[k].host ? v[k].host : "-", v[k].checkpoints ? newest : "-",
			(unsigned long long)v[k].checkpoints, cli_fmt_iec(v[k].bytes, size, sizeof size),
			*v[k].path ? v[k].path : "-");
	}
	fprintf(f, "%ld store%s on %s", n, n == 1 ? "" : "s", url);
	if (n == 1)
		fprintf(f, "; bring it back: ckptctl pull STORE --remote %s\n", url);
	else if (n > 1)
		fprintf(f, "; bring one back: ckptctl pull STORE --remote %s --store-id ID\n", url);
	else
		fputc('\n', f);
}

int ck_remote_stores(const char *cmd, const char *url, bool json, FILE *f)
{
	ckpt_remote_store *v;
	long n = ckpt_remote_stores(url, &v);
	if (n < 0)
		return ck_fail(cmd, (int)n, "cannot list the remote's stores");
	stores_print(f, url, v, n, json);
	ckpt_remote_stores_free(v);
	return f == stdout ? ck_stdout_done(cmd) : EXIT_OK;
}

int ck_list_stores_instead(const char *cmd, const char *path, const char *url, bool json)
{
	if (!url || !*url)
		url = getenv("CKPT_REMOTE");
	if (!path && (!url || !*url))
		return cli_usage_err(cmd, "expected STORE");
	if (!url || !*url)
		return -1;
	char p[4200];
	struct stat st;
	if (path) {
		snprintf(p, sizeof p, "%s/store", path);
		if (!stat(p, &st) || errno != ENOENT)
			return -1;
		/* A replacement node names where its store will be: what it can pull is the answer. */
		cli_err("%s: no store at %s; the stores on %s:", cmd, path, url);
	}
	return ck_remote_stores(cmd, url, json, stdout);
}

int ck_remote_mkdir(const char *cmd, const char *url)
{
	if (!url || !*url)
		url = getenv("CKPT_REMOTE");
	if (!url || !*url)
		return 0; /* ck_set_remote reports it */
	const char *dir = !strncmp(url, "file://", 7) ? url + 7 : url;
	struct stat st;
	if (dir[0] != '/' || !stat(dir, &st) || errno != ENOENT)
		return 0; /* not a directory remote, or there: opening it says what is wrong */
	char p[4200];
	snprintf(p, sizeof p, "%s", dir);
	for (char *c = p + 1;; c++) {
		if (*c && *c != '/')
			continue;
		char was = *c;
		*c = 0;
		if (mkdir(p, 0777) && errno != EEXIST) {
			cli_err("%s: cannot create the remote directory %s: %s", cmd, p, strerror(errno));
			return EXIT_FAIL;
		}
		if (!(*c = was))
			break;
	}
	cli_err("%s: created the remote directory %s", cmd, dir);
	return 0;
}


/* The steps of list[0..n) the remote (its checkpoints r[0..m), damaged ones too, ascending)
 * lacks, into todo; returns how many. */
static size_t missing_steps(const ckpt_info *list, int n, const ckpt_info *r, long m,
			    uint64_t *todo)
{
	size_t k = 0;
	long j = 0;
	for (int i = 0; i < n; i++) {
		while (j < m && r[j].step < list[i].step)
			j++;
		if (j >= m || r[j].step != list[i].step)
			todo[k++] = list[i].step;
	}
	return k;
}

static void all_json(ckpt_store *store, const char *url, const uint64_t *done, size_t k,
		     size_t present, const ckpt_remote_stats *sum)
{
	char id[33];
	ckpt_store_id(store, id);
	struct jw w;
	jw_init(&w, stdout, true);
	jw_obj_begin(&w);
	jw_key(&w, "remote"); jw_str(&w, url);
	jw_key(&w, "store_id"); jw_str(&w, id);
	jw_key(&w, "steps_pushed");
	jw_arr_begin(&w);
	for (size_t i = 0; i < k; i++)
		jw_u64(&w, done[i]);
	jw_arr_end(&w);
	jw_key(&w, "checkpoints_present"); jw_u64(&w, present);
	jw_key(&w, "packs_sent"); jw_u64(&w, sum->packs_sent);
	jw_key(&w, "bytes_sent"); jw_u64(&w, sum->bytes_sent);
	jw_key(&w, "packs_present"); jw_u64(&w, sum->packs_present);
	jw_key(&w, "bytes_present"); jw_u64(&w, sum->bytes_present);
	jw_obj_end(&w);
	jw_finish(&w);
}

int ck_xfer_progress(void *arg, uint64_t done, uint64_t total)
{
	struct ck_xprog *x = arg;
	if (!x->started)
		progress_start(&x->bar, x->label, total, x->enable);
	x->started = true;
	x->bar.total = total;
	progress_update(&x->bar, done);
	return 0;
}

/* Pushes todo[0..k) oldest first, a line (or progress) for each; *done counts those pushed.
 * Returns 0 or the exit status of the first failure (reported). */
static int push_each(const char *cmd, ckpt_remote *rm, const uint64_t *todo, size_t k,
		     bool json, bool progress, ckpt_remote_stats *sum, size_t *done)
{
	for (size_t i = 0; i < k; i++) {
		char label[64]; /* push --all's progress: one line per checkpoint, labelled with it */
		struct ck_xprog x = {.label = label, .enable = progress};
		snprintf(label, sizeof label, "push %llu (%zu/%zu)", (unsigned long long)todo[i],
			 i + 1, k);
		ckpt_remote_stats st = {.struct_size = sizeof st};
		int r = ckpt_remote_push(rm, todo[i], &st, ck_xfer_progress, &x);
		if (x.started)
			progress_end(&x.bar);
		if (r)
			return ck_fail(cmd, r, "push failed");
		(*done)++;
		sum->packs_sent += st.packs_sent;
		sum->bytes_sent += st.bytes_sent;
		sum->packs_present += st.packs_present;
		sum->bytes_present += st.bytes_present;
		char b[32];
		if (!json)
			printf("pushed step %llu: %llu pack%s (%s) sent\n", (unsigned long long)todo[i],
			       (unsigned long long)st.packs_sent, st.packs_sent == 1 ? "" : "s",
			       cli_fmt_iec(st.bytes_sent, b, sizeof b));
		fflush(stdout);
	}
	return 0;
}

int ck_push_all(const char *cmd, ckpt_store *store, ckpt_remote *rm, bool json, bool progress)
{
	ckpt_info *list = NULL, *remote = NULL;
	uint64_t *todo = NULL;
	ckpt_remote_stats sum = {0};
	size_t k = 0, done = 0;
	int rc = 0, n = (int)ckpt_store_list(store, 0, &list);
	long m = n < 0 ? 0 : ckpt_remote_list(rm, 1, &remote);
	if (n < 0 || m < 0)
		rc = ck_fail(cmd, n < 0 ? n : (int)m, n < 0 ? "cannot list the store"
							   : "cannot list the remote");
	else if (!(todo = calloc((size_t)n + 1, sizeof *todo)))
		rc = ck_fail(cmd, -CKPT_E_NOMEM, "out of memory");
	if (!rc) {
		k = missing_steps(list, n, remote, m, todo);
		rc = push_each(cmd, rm, todo, k, json, progress, &sum, &done);
	}
	if (!rc && json) {
		all_json(store, ckpt_remote_url(rm), todo, done, (size_t)n - k, &sum);
	} else if (!rc) {
		char b[32];
		if (!k)
			printf("nothing to push: %s has all %d checkpoint%s\n", ckpt_remote_url(rm),
			       n, n == 1 ? "" : "s");
		else
			printf("pushed %zu checkpoint%s (%s) to %s; %zu already there\n", done,
			       done == 1 ? "" : "s", cli_fmt_iec(sum.bytes_sent, b, sizeof b),
			       ckpt_remote_url(rm), (size_t)n - k);
	}
	free(todo);
	ckpt_info_free(remote);
	ckpt_info_free(list);
	return rc;
}
