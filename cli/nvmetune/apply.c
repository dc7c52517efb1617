/* plan, apply and rollback. apply saves what it replaces before it writes anything, writes in plan
 * order, and reads every value back: some writes succeed without effect (an md array's scheduler)
 * and some values are rounded, so only the read-back says whether a setting took. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *st_word(enum item_state s)
{
	switch (s) {
	case IS_SAME: return "ok";
	case IS_CHANGE: return "change";
	case IS_NA: return "n/a";
	case IS_UNSUPPORTED: return "unsupported";
	case IS_ERROR: return "error";
	}
	return "?";
}

/* The options of plan, apply and rollback. */
struct tune_args {
	const char *profile;
	bool dry, check;
};

#define OPT_PROFILE(text) \
	{CLI_OPT(CLI_STRING, "profile", 'p', CLI_AT(struct tune_args, profile), "P", text), \
	 .values = nt_profile_words, .complete = "@file"}
#define OPT_DRY(text) {CLI_OPT(CLI_FLAG, "dry-run", 'n', CLI_AT(struct tune_args, dry), NULL, text)}

static const struct cli_opt plan_opts[] = {
	OPT_PROFILE("checkpoint (default), default (the kernel's defaults), or a profile file"),
	{CLI_OPT(CLI_FLAG, "check", 0, CLI_AT(struct tune_args, check), NULL,
		 "verify: list only the knobs not at their target (drift) and exit 8\n"
		 "when there is any, 0 when all are in tune")},
	CLI_OPT_END,
};
static const struct cli_opt apply_opts[] = {
	OPT_PROFILE("checkpoint (default), default, or a profile file"),
	OPT_DRY("print what would be written, write nothing"),
	CLI_OPT_END,
};
static const struct cli_opt rollback_opts[] = {
	OPT_DRY("print what would be restored, write nothing"),
	CLI_OPT_END,
};

const struct cli_cmd nt_cmd_plan = {
	.name = "plan", .fn = cmd_plan, .help = "show each knob: current -> target of a profile, and why",
	.args = "[DEV ...]", .opts = plan_opts,
	.desc = "Shows, for each knob of each device, the current value, the target of the profile and why.\n"
		"Changes nothing. Without DEV: every NVMe namespace and md array.\n"
		"With --check it verifies instead (as tuned-adm verify does): a knob drifted when it is\n"
		"not at its target (change), cannot take it (unsupported) or cannot be read (error).\n",
	.tail = "\n"
		"Exit status: 0 shown, or with --check in tune; 8 --check found drift; 2 usage, 4 no such\n"
		"device or profile file.\n",
};

const struct cli_cmd nt_cmd_apply = {
	.name = "apply", .fn = cmd_apply,
	.help = "apply a profile, read every value back, save the previous values",
	.args = "[DEV ...]", .opts = apply_opts,
	.desc = "Writes the profile's settings (global, then controllers, then members, then arrays; the\n"
		"scheduler before nr_requests), reads each one back and reports any that did not take.\n"
		"The previous values are saved in the state file (default /var/lib/nvmetune/state.json)\n"
		"before anything is written; 'nvmetune rollback' restores them.\n",
	.tail = "\n"
		"Exit status: 0 all settings took, 3 another apply or rollback is running, 5 some failed or\n"
		"did not take, 7 not root.\n",
};

const struct cli_cmd nt_cmd_rollback = {
	.name = "rollback", .fn = cmd_rollback, .help = "restore the values saved by apply",
	.opts = rollback_opts,
	.desc = "Restores the values saved by 'nvmetune apply', in write order, and reads each one back.\n"
		"The state file is removed once everything is restored.\n",
	.tail = "\n"
		"Exit status: 0 restored, 3 another apply or rollback is running, 4 no saved state, 5 some\n"
		"values could not be restored.\n",
};

static void print_plan_text(const struct profile *p, const struct plan *pl)
{
	printf("profile: %s\n", p->name);
	printf("%-9s %-15s %-14s %-14s %-11s %s\n", "DEVICE", "KNOB", "CURRENT", "TARGET", "ACTION", "WHY");
	int cnt[5] = {0};
	for (int i = 0; i < pl->n; i++) {
		const struct item *it = &pl->it[i];
		cnt[it->st]++;
		printf("%-9s %-15s %-14s %-14s %-11s %s\n", it->dev, knob_name(it->knob), it->cur, it->tgt,
		       st_word(it->st), it->why);
	}
	printf("%d to change, %d already set, %d not applicable, %d unsupported, %d unreadable\n",
	       cnt[IS_CHANGE], cnt[IS_SAME], cnt[IS_NA], cnt[IS_UNSUPPORTED], cnt[IS_ERROR]);
}

static void json_item(struct jw *w, const struct item *it)
{
	const struct out_kv f[] = {
		{"device", it->dev}, {"knob", knob_name(it->knob)}, {"current", it->cur},
		{"target", it->tgt}, {"action", st_word(it->st)}, {"why", it->why},
	};
	out_strs(w, f, sizeof(f) / sizeof(f[0]));
}

/* A knob not in the profile's state: not at its target, unable to take it, or unreadable. */
static bool drifted(const struct item *it)
{
	return it->st == IS_CHANGE || it->st == IS_UNSUPPORTED || it->st == IS_ERROR;
}

/* The items (only the drifted ones when drift) as a JSON array under key. */
static void json_items(struct jw *w, const char *key, const struct plan *pl, bool drift)
{
	jw_key(w, key);
	jw_arr_begin(w);
	for (int i = 0; i < pl->n; i++) {
		if (drift && !drifted(&pl->it[i]))
			continue;
		jw_obj_begin(w);
		json_item(w, &pl->it[i]);
		jw_obj_end(w);
	}
	jw_arr_end(w);
}

/* plan --check: each drifted knob, then the verdict. Returns EXIT_OK or EXIT_DRIFT. */
static int check_plan(struct jw *w, const struct profile *p, const struct plan *pl)
{
	int ndrift = 0, nok = 0;
	for (int i = 0; i < pl->n; i++) {
		const struct item *it = &pl->it[i];
		ndrift += drifted(it);
		nok += it->st == IS_SAME;
		if (!w && drifted(it))
			printf("drift: %-9s %-15s %s, target %s (%s): %s\n", it->dev, knob_name(it->knob),
			       it->cur, it->tgt, st_word(it->st), it->why);
	}
	if (w) {
		jw_key(w, "in_tune");
		jw_bool(w, ndrift == 0);
		json_items(w, "drift", pl, true);
	} else if (ndrift) {
		printf("%d knob%s drifted from profile %s (%d in tune); 'nvmetune apply' sets them\n",
		       ndrift, ndrift == 1 ? "" : "s", p->name, nok);
	} else {
		printf("in tune: all %d knobs that apply are at the targets of profile %s\n", nok,
		       p->name);
	}
	return ndrift ? EXIT_DRIFT : EXIT_OK;
}

int cmd_plan(int argc, char **argv)
{
	struct tune_args opt = {0};
	int rc = cli_parse_opts(&nt_cmd_plan, &opt, &argc, argv);
	if (rc >= 0)
		return rc;
	struct profile p;
	struct plan pl;
	if ((rc = plan_load(opt.profile, argv + 1, argc - 1, &p, &pl)))
		return rc;
	struct jw jwv, *w = out_begin(&jwv);
	if (w) {
		jw_key(w, "profile");
		jw_str(w, p.name);
	}
	if (opt.check) {
		rc = check_plan(w, &p, &pl);
	} else if (w) {
		json_items(w, "knobs", &pl, false);
		format_advice(w, &pl);
	} else {
		print_plan_text(&p, &pl);
		format_advice(NULL, &pl);
	}
	out_end(w);
	plan_free(&pl);
	return rc;
}

/* One write + read-back. Returns 0 when the value reads back as wanted; fills result/why. */
static int write_verify(enum knob_id k, const char *key, const char *want, char *back, size_t blen,
			const char **result, char *why, size_t wlen)
{
	int rc = key_write(k, key, want, why, wlen);
	if (rc) {
		*result = "failed";
		back[0] = 0;
		return -1;
	}
	char rwhy[192] = "";
	if (key_read(k, key, back, blen, rwhy, sizeof(rwhy))) {
		*result = "failed";
		snprintf(why, wlen, "read-back: %s", rwhy);
		return -1;
	}
	if (strcmp(back, want)) {
		*result = "not-taken";
		snprintf(why, wlen, "wrote '%s', reads back '%s'", want, back);
		return -1;
	}
	*result = "ok";
	return 0;
}

static void result_line(struct jw *w, const char *dev, enum knob_id k, const char *from,
			const char *to, const char *result, const char *back, const char *why)
{
	if (w) {
		const struct out_kv f[] = {
			{"device", dev}, {"knob", knob_name(k)}, {"previous", from}, {"target", to},
			{"result", result}, {"readback", back}, {"why", why},
		};
		jw_obj_begin(w);
		out_strs(w, f, sizeof(f) / sizeof(f[0]));
		jw_obj_end(w);
		return;
	}
	char arrow[200];
	snprintf(arrow, sizeof(arrow), "%s -> %s", from, to);
	printf("%-9s %-15s %-30s %s%s%s\n", dev, knob_name(k), arrow,
	       !strcmp(result, "not-taken") ? "DID NOT TAKE" : !strcmp(result, "failed") ? "FAILED" : result,
	       *why ? ": " : "", why);
}

/* Why a state file cannot be used (state_load's error). */
static const char *state_error(int rc)
{
	return rc == -EINVAL ? "not a valid nvmetune state file" : strerror(-rc);
}

/* apply and rollback change the system: unless dry, they need root and the state lock. Returns 0
 * or the exit status (reported). */
static int may_change(const char *cmd, bool dry)
{
	int rc = 0;
	if (!dry && ((rc = nt_need_root(cmd)) || (rc = lock_state(cmd))))
		return rc;
	return 0;
}

/* JSON: the "results" array, after the command's own keys; then "ok" and the document's end. */
static void results_open(struct jw *w)
{
	jw_key(w, "results");
	jw_arr_begin(w);
}

static void results_close(struct jw *w, int nbad)
{
	jw_arr_end(w);
	jw_key(w, "ok");
	jw_bool(w, nbad == 0);
	out_end(w);
}

/* Adds the values the plan changes to st; a scheduler change brings nr_requests along. */
static void state_add_changes(struct state *st, const struct plan *pl)
{
	for (int i = 0; i < pl->n; i++) {
		const struct item *it = &pl->it[i];
		if (it->st != IS_CHANGE)
			continue;
		state_add(st, it);
		if (it->knob == K_SCHEDULER) {
			/* the kernel resets nr_requests on a scheduler change: save it too */
			struct item nr = *it;
			nr.knob = K_NR_REQUESTS;
			nr.order = it->order - K_SCHEDULER + K_NR_REQUESTS;
			snprintf(nr.key, sizeof(nr.key), "sys:block/%s/queue/nr_requests", it->dev);
			char why[64];
			if (!key_read(K_NR_REQUESTS, nr.key, nr.cur, sizeof(nr.cur), why, sizeof(why)))
				state_add(st, &nr);
		}
	}
}

/* Saves what the plan replaces, before anything is written, added to an earlier apply's state.
 * *saved: a state file holds them. Returns EXIT_OK or EXIT_FAIL (reported; nothing changed). */
static int save_previous(const struct profile *p, const struct plan *pl, bool *saved)
{
	struct state st;
	int rc = state_load(nt.state_file, &st);
	if (rc == -ENOENT) {
		memset(&st, 0, sizeof(st));
		now_iso(st.created, sizeof(st.created));
	} else if (rc) {
		cli_err("%s: %s; fix or remove it (it holds the values rollback restores)",
			nt.state_file, state_error(rc));
		return EXIT_FAIL;
	}
	if (!st.profile[0]) /* a second apply adds to the first: keep its name */
		snprintf(st.profile, sizeof(st.profile), "%s", p->name);
	state_add_changes(&st, pl);
	/* nothing to change and nothing saved before: leave no state file behind, so that a later
	 * rollback does not claim to restore an apply that changed nothing */
	if (st.n && (rc = state_save(nt.state_file, &st))) {
		cli_err("%s: cannot save the previous values: %s; nothing changed", nt.state_file,
			strerror(-rc));
		state_free(&st);
		return EXIT_FAIL;
	}
	*saved = st.n > 0;
	state_free(&st);
	return EXIT_OK;
}

struct tally {
	int ok, same, bad;
};

/* One item of the plan: written and read back (dry: what would be written), reported, counted. */
static void apply_item(struct jw *wp, const struct item *it, bool dry, struct tally *t)
{
	char back[96] = "", why[PATH_MAX + 256] = "";
	const char *result;
	switch (it->st) {
	case IS_SAME:
		t->same++;
		result_line(wp, it->dev, it->knob, it->cur, it->tgt, "unchanged", it->cur, "");
		return;
	case IS_NA:
		return;
	case IS_UNSUPPORTED:
	case IS_ERROR:
		t->bad++;
		result_line(wp, it->dev, it->knob, it->cur, it->tgt,
			    it->st == IS_ERROR ? "failed" : "unsupported", "", it->why);
		return;
	case IS_CHANGE:
		break;
	}
	if (dry) {
		if (!strncmp(it->key, "sys:", 4)) {
			char path[PATH_MAX];
			sys_path(path, sizeof(path), it->key + 4);
			snprintf(why, sizeof(why), "would write '%s' to %s", it->tgt, path);
		} else {
			snprintf(why, sizeof(why), "would set NVMe feature 0x06 (volatile write cache)");
		}
		result_line(wp, it->dev, it->knob, it->cur, it->tgt, "dry-run", "", why);
		return;
	}
	if (write_verify(it->knob, it->key, it->tgt, back, sizeof(back), &result, why, sizeof(why)))
		t->bad++;
	else
		t->ok++;
	result_line(wp, it->dev, it->knob, it->cur, it->tgt, result, back, why);
}

int cmd_apply(int argc, char **argv)
{
	struct tune_args opt = {0};
	int rc = cli_parse_opts(&nt_cmd_apply, &opt, &argc, argv);
	if (rc >= 0)
		return rc;
	bool dry = opt.dry, saved = false;
	if ((rc = may_change("apply", dry)))
		return rc;
	struct profile p;
	struct plan pl;
	if ((rc = plan_load(opt.profile, argv + 1, argc - 1, &p, &pl)))
		return rc;
	if (!dry && (rc = save_previous(&p, &pl, &saved))) {
		plan_free(&pl);
		return rc;
	}
	struct jw jwv, *wp = out_begin(&jwv);
	if (wp) {
		jw_key(wp, "profile");
		jw_str(wp, p.name);
		jw_key(wp, "dry_run");
		jw_bool(wp, dry);
		jw_key(wp, "state_file");
		jw_str(wp, saved ? nt.state_file : "");
		results_open(wp);
	} else {
		printf("profile %s%s%s\n", p.name,
		       dry ? " (dry run: nothing is written)"
			   : saved ? "; previous values saved in " : "; nothing to change",
		       saved ? nt.state_file : "");
	}
	struct tally t = {0};
	for (int i = 0; i < pl.n; i++)
		apply_item(wp, &pl.it[i], dry, &t);
	if (wp)
		results_close(wp, t.bad);
	else if (!dry)
		printf("%d applied, %d already set, %d failed or not taken\n", t.ok, t.same, t.bad);
	plan_free(&pl);
	return t.bad ? EXIT_PARTIAL : EXIT_OK;
}

static int cmp_saved(const void *a, const void *b)
{
	const struct saved *x = a, *y = b;
	return (x->order > y->order) - (x->order < y->order);
}

/* One saved value: restored and read back (dry: only compared), reported, counted in t (a device
 * gone since apply is skipped, not a failure). */
static void restore_item(struct jw *wp, const struct saved *s, bool dry, struct tally *t)
{
	char cur[96] = "?", back[96] = "", why[256] = "";
	const char *result;
	if (!strncmp(s->key, "sys:", 4) && !sys_exists(s->key + 4)) {
		snprintf(why, sizeof(why), "%s no longer exists", s->dev);
		result_line(wp, s->dev, s->knob, "-", s->prev, "skipped", "", why);
		return;
	}
	if (key_read(s->knob, s->key, cur, sizeof(cur), why, sizeof(why))) {
		t->bad++;
		result_line(wp, s->dev, s->knob, "?", s->prev, "failed", "", why);
		return;
	}
	why[0] = 0;
	if (!strcmp(cur, s->prev)) {
		t->ok++;
		result_line(wp, s->dev, s->knob, cur, s->prev, "unchanged", cur, "");
		return;
	}
	if (dry) {
		result_line(wp, s->dev, s->knob, cur, s->prev, "dry-run", "", "");
		return;
	}
	if (write_verify(s->knob, s->key, s->prev, back, sizeof(back), &result, why, sizeof(why)))
		t->bad++;
	else
		t->ok++;
	result_line(wp, s->dev, s->knob, cur, s->prev, result, back, why);
}

int cmd_rollback(int argc, char **argv)
{
	struct tune_args opt = {0};
	int rc = cli_parse_opts(&nt_cmd_rollback, &opt, &argc, argv);
	if (rc >= 0)
		return rc;
	const char *prof = opt.profile;
	bool dry = opt.dry;
	if (prof || argc > 1)
		return cli_usage_err("rollback", "takes no profile or devices: it restores everything "
				     "saved in %s", nt.state_file);
	if ((rc = may_change("rollback", dry)))
		return rc;
	struct state st;
	rc = state_load(nt.state_file, &st);
	if (rc == -ENOENT) {
		cli_err("rollback: %s: no saved state (nothing applied, or already rolled back)",
			nt.state_file);
		return EXIT_NOTFOUND;
	}
	if (rc) {
		cli_err("rollback: %s: %s", nt.state_file, state_error(rc));
		return EXIT_FAIL;
	}
	qsort(st.s, (size_t)st.n, sizeof(*st.s), cmp_saved);
	struct jw jwv, *wp = out_begin(&jwv);
	if (wp) {
		jw_key(wp, "state_file");
		jw_str(wp, nt.state_file);
		jw_key(wp, "dry_run");
		jw_bool(wp, dry);
		results_open(wp);
	} else {
		printf("restoring %d value%s saved at %s by profile %s%s\n", st.n, st.n == 1 ? "" : "s",
		       st.created, st.profile, dry ? " (dry run: nothing is written)" : "");
	}
	struct tally t = {0};
	for (int i = 0; i < st.n; i++)
		restore_item(wp, &st.s[i], dry, &t);
	if (!dry && !t.bad && unlink(nt.state_file) && errno != ENOENT)
		cli_err("rollback: cannot remove %s: %s", nt.state_file, strerror(errno));
	if (wp) {
		results_close(wp, t.bad);
	} else if (!dry) {
		printf("%d restored, %d failed%s\n", t.ok, t.bad,
		       t.bad ? "; the state file is kept, run rollback again after fixing the cause" : "");
	}
	state_free(&st);
	return t.bad ? EXIT_PARTIAL : EXIT_OK;
}
