/* Profiles: for each knob, keep it, compute it (auto: the checkpoint rule), restore the kernel's
 * default, or set a literal value. Two are built in; users write their own as "knob = value" files
 * (format in docs/nvmetune.1). */
#include "nvmetune.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const knob_names[K_COUNT] = {
	[K_ASPM] = "aspm",
	[K_APST] = "apst",
	[K_VWC] = "vwc",
	[K_SCHEDULER] = "scheduler",
	[K_NR_REQUESTS] = "nr_requests",
	[K_READ_AHEAD] = "read_ahead_kb",
	[K_MAX_SECTORS] = "max_sectors_kb",
	[K_WRITE_CACHE] = "write_cache",
};

const char *knob_name(enum knob_id k)
{
	return k < K_COUNT ? knob_names[k] : "?";
}

int knob_by_name(const char *s)
{
	for (int k = 0; k < K_COUNT; k++)
		if (!strcmp(knob_names[k], s))
			return k;
	return -1;
}

static void builtin(struct profile *p, const char *name)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	bool ckpt = !strcmp(name, "checkpoint");
	for (int k = 0; k < K_COUNT; k++)
		p->t[k].kind = ckpt ? TG_AUTO : TG_DEFAULT;
	/* nr_requests: the scheduler sets it; the kernel's VWC default is the drive's own state */
	p->t[K_NR_REQUESTS].kind = TG_KEEP;
	if (!ckpt)
		p->t[K_VWC].kind = TG_KEEP;
}

static bool is_word(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
			return false;
	return true;
}

/* Checks a literal value for a knob; returns NULL or what is wrong with it. */
static const char *check_value(int k, const char *v)
{
	uint64_t n;
	switch (k) {
	case K_SCHEDULER:
		return is_word(v) ? NULL : "a scheduler name (none, mq-deadline, kyber, bfq)";
	case K_NR_REQUESTS:
	case K_READ_AHEAD:
	case K_MAX_SECTORS:
		return cli_parse_u64(v, &n) || (k != K_READ_AHEAD && n == 0) ? "a positive integer" : NULL;
	case K_WRITE_CACHE:
		return !strcmp(v, "write back") || !strcmp(v, "write through") ? NULL
			: "'write back' or 'write through'";
	case K_ASPM:
		return !strcmp(v, "default") || !strcmp(v, "performance") || !strcmp(v, "powersave") ||
		       !strcmp(v, "powersupersave") ? NULL
			: "default, performance, powersave or powersupersave";
	case K_APST:
	case K_VWC:
		return !strcmp(v, "on") || !strcmp(v, "off") ? NULL : "on or off";
	}
	return "?";
}

static int parse_file(const char *path, struct profile *p)
{
	char *data;
	int rc = read_file(path, &data, NULL);
	if (rc) {
		cli_err("profile %s: %s", path, strerror(-rc));
		return rc == -ENOENT ? EXIT_NOTFOUND : EXIT_FAIL;
	}
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", path);
	int lineno = 0, ret = EXIT_OK;
	bool seen_setting = false;
	/* strsep, not strtok: blank lines must count, or the line numbers in errors are wrong */
	for (char *rest = data, *line; (line = strsep(&rest, "\n"));) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char t[256];
		trim_copy(t, sizeof(t), line);
		if (!t[0])
			continue;
		char *eq = strchr(t, '=');
		if (!eq) {
			cli_err("profile %s:%d: expected 'knob = value', got '%s'", path, lineno, t);
			ret = EXIT_USAGE;
			break;
		}
		*eq = 0;
		char key[64], val[64];
		trim_copy(key, sizeof(key), t);
		trim_copy(val, sizeof(val), eq + 1);
		if (!strcmp(key, "inherit")) {
			if (seen_setting || (strcmp(val, "checkpoint") && strcmp(val, "default"))) {
				cli_err("profile %s:%d: 'inherit' must come first and name checkpoint or default",
					path, lineno);
				ret = EXIT_USAGE;
				break;
			}
			builtin(p, val);
			snprintf(p->name, sizeof(p->name), "%s", path);
			continue;
		}
		int k = knob_by_name(key);
		if (k < 0) {
			cli_err("profile %s:%d: unknown knob '%s' (aspm, apst, vwc, scheduler, nr_requests, "
				"read_ahead_kb, max_sectors_kb, write_cache)", path, lineno, key);
			ret = EXIT_USAGE;
			break;
		}
		seen_setting = true;
		struct target *tg = &p->t[k];
		if (!strcmp(val, "keep")) {
			tg->kind = TG_KEEP;
		} else if (!strcmp(val, "auto")) {
			tg->kind = TG_AUTO;
		} else if (!strcmp(val, "default") && k != K_ASPM) {
			if (k == K_VWC) {
				cli_err("profile %s:%d: vwc has no kernel default; use on, off, auto or keep",
					path, lineno);
				ret = EXIT_USAGE;
				break;
			}
			tg->kind = TG_DEFAULT;
		} else {
			const char *bad = check_value(k, val);
			if (bad) {
				cli_err("profile %s:%d: bad value '%s' for %s: expected %s, or keep/auto/default",
					path, lineno, val, key, bad);
				ret = EXIT_USAGE;
				break;
			}
			tg->kind = TG_VALUE;
			snprintf(tg->value, sizeof(tg->value), "%s", val);
		}
	}
	free(data);
	return ret;
}

const char *const nt_profile_words[] = {"checkpoint", "default", NULL};

int profile_load(const char *spec, struct profile *p)
{
	if (!spec || !strcmp(spec, "checkpoint") || !strcmp(spec, "default")) {
		builtin(p, spec ? spec : "checkpoint");
		return EXIT_OK;
	}
	if (!strchr(spec, '/') && access(spec, F_OK)) {
		cli_err("unknown profile '%s': expected checkpoint, default, or a profile file", spec);
		return EXIT_USAGE;
	}
	return parse_file(spec, p);
}
