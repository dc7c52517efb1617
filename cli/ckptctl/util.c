/* Helpers shared by ckptctl's commands: step arguments, opening stores, mapping library errors
 * to messages and exit statuses. */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int ck_parse_step(const char *cmd, const char *s, uint64_t *out)
{
	if (!strcmp(s, "latest")) {
		*out = CKPT_STEP_LATEST;
		return 0;
	}
	if (cli_parse_u64(s, out) || *out == CKPT_STEP_LATEST)
		return cli_usage_err(cmd, "invalid step '%s': expected a number or 'latest'", s);
	return 0;
}

int ck_exit_status(int err)
{
	switch (err < 0 ? -err : err) {
	case CKPT_E_NOTFOUND:
		return EXIT_NOTFOUND;
	case CKPT_E_BUSY:
		return EXIT_BUSY;
	default:
		return EXIT_FAIL;
	}
}

int ck_fail(const char *cmd, int err, const char *what)
{
	const char *m = ckpt_errmsg();
	if (m && *m)
		cli_err("%s: %s", cmd, m);
	else
		cli_err("%s: %s: %s", cmd, what, ckpt_strerror(err));
	return ck_exit_status(err);
}

int ck_open_store(const char *cmd, const char *path, bool ro, const ckpt_options *extra,
		  ckpt_store **out)
{
	ckpt_options *own = NULL;
	const ckpt_options *opts = extra;
	*out = NULL;
	if (ro) {
		own = ckpt_options_create();
		if (!own) {
			cli_err("%s: out of memory", cmd);
			return EXIT_FAIL;
		}
		ckpt_options_set(own, CKPT_OPT_READ_ONLY, 1);
		opts = own;
	}
	int r = ckpt_store_open(path, opts, out);
	ckpt_options_free(own);
	if (r < 0) {
		char what[4200];
		snprintf(what, sizeof what, "cannot open store '%s'", path);
		return ck_fail(cmd, r, what);
	}
	/* A mount whose flocks are node-local (NFS local_lock, Lustre localflock): said once. */
	const char *w = ckpt_store_warning(*out);
	if (w)
		cli_err("%s: warning: %s", cmd, w);
	return 0;
}

const char *ck_invalid_reason(ckpt_store *store, const ckpt_info *info, char *buf, size_t len)
{
	ckpt_reader *rd = NULL;
	int r = ckpt_reader_open(store, info->step, CKPT_READ_AS_SAVED, &rd);
	if (r < 0 && ckpt_errmsg()[0])
		snprintf(buf, len, "%s", ckpt_errmsg());
	else
		snprintf(buf, len, "manifest invalid: %s", ckpt_strerror(info->error));
	ckpt_reader_close(rd);
	return buf;
}

/* True for what ck_parse_step() takes: "latest" or a decimal number. */
static bool looks_like_step(const char *s)
{
	if (!strcmp(s, "latest"))
		return true;
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

int ck_default_store(int argc, char ***argv, int at, int min, bool step_next)
{
	const char *env = getenv("CKPT_STORE");
	int npos = argc - at;
	if (!env || !*env)
		return argc;
	if (npos >= min) {
		struct stat st;
		const char *first = (*argv)[at];
		if (!step_next || !looks_like_step(first) || (!stat(first, &st) && S_ISDIR(st.st_mode)))
			return argc;
	}
	/* Lives as long as the process: the command's argv from here on. */
	char **v = malloc(((size_t)argc + 2) * sizeof *v);
	if (!v)
		return argc;
	memcpy(v, *argv, (size_t)at * sizeof *v);
	v[at] = (char *)env;
	memcpy(v + at + 1, *argv + at, (size_t)npos * sizeof *v);
	v[argc + 1] = NULL;
	*argv = v;
	return argc + 1;
}

int ck_parse(const struct cli_cmd *cmd, void *args, int *argc, char ***argv,
	     const struct ck_pos *pos)
{
	int rc = cli_parse_opts(cmd, args, argc, *argv);
	if (rc >= 0)
		return rc;
	*argc = ck_default_store(*argc, argv, 1, pos->min, pos->step_next);
	int npos = *argc - 1;
	if (npos < pos->min)
		return cli_usage_err(cmd->name, "%s", pos->missing[npos < 3 ? npos : 3]);
	if (pos->max >= 0 && npos > pos->max)
		return cli_usage_err(cmd->name, "too many arguments");
	return -1;
}

const struct ck_pos ck_pos_store = {1, 1, false, {"expected STORE"}};

int ck_parse_open(const struct cli_cmd *cmd, void *args, int *argc, char ***argv, bool ro,
		  ckpt_store **store)
{
	int rc = ck_parse(cmd, args, argc, argv, &ck_pos_store);
	if (rc < 0 && (rc = ck_open_store(cmd->name, (*argv)[1], ro, NULL, store)) == 0)
		return -1;
	return rc;
}
