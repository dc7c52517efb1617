/* Whether this kernel can run md arrays, checked before mdadm runs. On a kernel without
 * md, mdadm makes the /dev/mdN node itself, fails to open it and exits 1, leaving the node behind;
 * so raid create and raid assemble look first, and refuse with what they looked at.
 *
 * /proc/mdstat exists exactly when md is loaded or built in, and its "Personalities" line lists
 * the RAID levels registered. What is missing may still be a module that can be loaded: the real
 * run loads it with modprobe (a dry run prints those modprobe lines), which is what a stock Debian
 * kernel needs before the first array. The modules are looked up where modprobe looks, in
 * /lib/modules/RELEASE (modules.dep, modules.builtin), which works the same with kmod and busybox.
 * With moved roots (a test tree) the fake /proc/mdstat is the whole truth: no module is looked up
 * or loaded in the real kernel. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

bool nt_modlist_has(const char *list, const char *mod)
{
	size_t n = strlen(mod);
	for (const char *p = list; p && *p;) {
		/* a line is "kernel/drivers/md/md-mod.ko[.xz]: deps" (modules.dep) or the path alone */
		size_t l = strcspn(p, "\n:");
		const char *b = p, *slash;
		while ((slash = memchr(b, '/', (size_t)(p + l - b))))
			b = slash + 1;
		bool same = (size_t)(p + l - b) >= n + 3 && !strncmp(b + n, ".ko", 3) &&
			    (b[n + 3] == '.' || b + n + 3 == p + l);
		for (size_t i = 0; same && i < n; i++)
			same = b[i] == mod[i] || ((b[i] == '-' || b[i] == '_') && (mod[i] == '-' || mod[i] == '_'));
		if (same)
			return true;
		p += strcspn(p, "\n");
		p += *p == '\n';
	}
	return false;
}

/* What was found, for the checks and their messages. */
struct mdk {
	char mdstat[PATH_MAX], moddir[PATH_MAX + 16];
	char *stat; /* /proc/mdstat, NULL when absent */
};

static void mdk_read_stat(struct mdk *k)
{
	size_t len;
	free(k->stat);
	k->stat = NULL;
	if (read_file(k->mdstat, &k->stat, &len))
		k->stat = NULL;
}

/* Whether mod is a module of the running kernel (built in or loadable); never with moved roots. */
static bool mod_available(const struct mdk *k, const char *mod)
{
	if (nt.moved)
		return false;
	bool have = false;
	const char *lists[] = {"modules.builtin", "modules.dep"};
	for (int i = 0; i < 2 && !have; i++) {
		char p[PATH_MAX + 32], *text;
		size_t len;
		snprintf(p, sizeof(p), "%s/%s", k->moddir, lists[i]);
		if (read_file(p, &text, &len))
			continue;
		have = nt_modlist_has(text, mod);
		free(text);
	}
	return have;
}

/* Whether /proc/mdstat's Personalities line has [pers]. */
static bool has_personality(const struct mdk *k, const char *pers)
{
	char want[40];
	snprintf(want, sizeof(want), "[%s]", pers);
	const char *l = k->stat ? strstr(k->stat, "Personalities") : NULL;
	if (!l)
		return false;
	size_t n = strcspn(l, "\n");
	const char *hit = strstr(l, want);
	return hit && hit < l + n;
}

/* Where mod was looked for, after "... is absent" or "... lists no ...". */
static const char *where(const struct mdk *k, const char *mod, char *buf, size_t len)
{
	if (nt.moved)
		snprintf(buf, len, " (moved roots: no module is looked up)");
	else
		snprintf(buf, len, " and %s lists no %s module (modules.dep, modules.builtin)", k->moddir,
			 mod);
	return buf;
}

/* Loads mod (a real run), or for a dry run records it in plan (or prints the modprobe line
 * when plan is NULL). Returns 0 or EXIT_FAIL (reported). */
static int load(const char *cmd, const char *mod, bool dry, struct nt_md_plan *plan)
{
	char *av[] = {"modprobe", (char *)mod, NULL};
	if (dry && plan && plan->nload < 2)
		snprintf(plan->load[plan->nload++], sizeof(plan->load[0]), "%s", mod);
	if (dry && !plan)
		print_argv(stdout, av);
	if (dry)
		return 0;
	int rc = run_argv(av);
	if (rc) {
		cli_err("%s: this kernel has no md driver: modprobe %s failed (%s %d); nothing was done",
			cmd, mod, rc < 0 ? "cannot run it:" : "exit", rc < 0 ? -rc : rc);
		return EXIT_FAIL;
	}
	return 0;
}

/* After a real run's modprobe: what it loaded shows in /proc/mdstat. Returns 0 or EXIT_FAIL. */
static int loaded(const char *cmd, struct mdk *k, const char *mod, const char *pers)
{
	mdk_read_stat(k);
	if (k->stat && (!pers || has_personality(k, pers)))
		return 0;
	cli_err("%s: this kernel has no md driver: modprobe %s succeeded but %s %s; nothing was done",
		cmd, mod, k->mdstat, k->stat ? "lists no such personality" : "is still absent");
	return EXIT_FAIL;
}

/* The kernel lacks what is needed: a real run refuses (what, then hint); a dry run, which shows
 * the plan all the same, warns that the real run would stop here (into plan when given).
 * Returns the exit status: EXIT_FAIL, or 0 for a dry run. */
static int lacking(const char *cmd, bool dry, struct nt_md_plan *plan, const char *what,
		   const char *hint)
{
	if (!dry) {
		cli_err("%s: %s; nothing was done (%s)", cmd, what, hint);
		return EXIT_FAIL;
	}
	char w[sizeof(plan->warning)];
	snprintf(w, sizeof(w), "%s; a real run would be refused (%s)", what, hint);
	if (plan)
		snprintf(plan->warning, sizeof(plan->warning), "%s", w);
	else
		cli_err("%s: warning: %s", cmd, w);
	return 0;
}

int nt_md_driver(const char *cmd, const char *level, bool dry)
{
	return nt_md_check(cmd, level, dry, NULL);
}

int nt_md_check(const char *cmd, const char *level, bool dry, struct nt_md_plan *plan)
{
	struct mdk k = {0};
	struct utsname u;
	char why[PATH_MAX + 128], pers[16], have[128] = "", what[2 * PATH_MAX + 512], hint[160];
	int rc = EXIT_FAIL;
	proc_path(k.mdstat, sizeof(k.mdstat), "mdstat");
	snprintf(k.moddir, sizeof(k.moddir), "/lib/modules/%s", uname(&u) ? "?" : u.release);
	mdk_read_stat(&k);
	if (!k.stat && !mod_available(&k, "md_mod")) {
		snprintf(what, sizeof(what), "this kernel has no md driver: %s is absent (md is "
			 "neither loaded nor built in)%s", k.mdstat, where(&k, "md_mod", why, sizeof(why)));
		rc = lacking(cmd, dry, plan, what, "load it with 'modprobe md_mod', or boot a kernel "
			     "built with CONFIG_BLK_DEV_MD");
		goto out;
	}
	if (!k.stat && (load(cmd, "md_mod", dry, plan) || (!dry && loaded(cmd, &k, "md_mod", NULL))))
		goto out;
	snprintf(pers, sizeof(pers), "raid%s", level ? level : "");
	if (level && !has_personality(&k, pers)) {
		const char *l = k.stat ? strstr(k.stat, "Personalities") : NULL;
		if (l) {
			char raw[120], line[120];
			snprintf(raw, sizeof(raw), "%.*s", (int)strcspn(l, "\n"), l);
			trim_copy(line, sizeof(line), raw);
			snprintf(have, sizeof(have), " (%s)", line);
		}
		if (!mod_available(&k, pers)) {
			snprintf(what, sizeof(what), "this kernel has no md driver for RAID %s: %s %s "
				 "[%s]%s%s", level, k.mdstat, k.stat ? "lists no personality"
				 : "is absent, so it lists no", pers, have,
				 where(&k, pers, why, sizeof(why)));
			snprintf(hint, sizeof(hint), "load it with 'modprobe %s', or boot a kernel built "
				 "with CONFIG_MD_RAID%s", pers, level);
			rc = lacking(cmd, dry, plan, what, hint);
			goto out;
		}
		if (load(cmd, pers, dry, plan) || (!dry && loaded(cmd, &k, pers, pers)))
			goto out;
	}
	rc = EXIT_OK;
out:
	free(k.stat);
	return rc;
}
