/* Option tables: one declaration per option (struct cli_opt) from which the parser, the --help
 * text and the shell completion are all made, so that they cannot disagree. */
#include "cli.h"

#include <string.h>

static bool takes_value(const struct cli_opt *o)
{
	return o->kind != CLI_FLAG;
}

static bool is_option(const struct cli_opt *o)
{
	return o->kind != CLI_END && o->kind != CLI_GROUP;
}

/* Stores arg as o's value into args. spell is the option as the user wrote it. Returns -1, or
 * the exit status of a usage error (reported). */
static int store_value(const char *cmd, const struct cli_opt *o, const char *spell,
		       const char *arg, void *args)
{
	void *t = (char *)args + o->off;
	uint64_t v;
	switch (o->kind) {
	case CLI_FLAG:
		*(bool *)t = true;
		return -1;
	case CLI_STRING:
		*(const char **)t = arg;
		return -1;
	case CLI_CALL: {
		int r = o->call(cmd, o->code, arg, t);
		return r ? r : -1;
	}
	case CLI_ENUM:
		for (int k = 0; o->values[k]; k++)
			if (!strcmp(arg, o->values[k])) {
				*(int *)t = k;
				return -1;
			}
		break;
	case CLI_SIZE:
	case CLI_U64:
		if ((o->kind == CLI_SIZE ? cli_parse_size(arg, &v) : cli_parse_u64(arg, &v)) ||
		    v < o->min || (o->max && v > o->max) ||
		    ((o->flags & CLI_POW2) && (v & (v - 1))))
			break;
		*(uint64_t *)t = v;
		return -1;
	default:
		break;
	}
	if (o->bad) { /* a format from the table, not from the user */
		char msg[512];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		snprintf(msg, sizeof msg, o->bad, arg);
#pragma GCC diagnostic pop
		return cli_usage_err(cmd, "%s", msg);
	}
	return cli_usage_err(cmd, "invalid value '%s' for %s", arg, spell);
}

/* "unknown option '--x'", with the closest long names. */
static int unknown_option(const struct cli_cmd *cmd, const char *spell)
{
	const char *names[64];
	size_t n = 0;
	for (const struct cli_opt *o = cmd->opts; o->kind != CLI_END && n < 63; o++)
		if (is_option(o))
			names[n++] = o->name;
	names[n++] = "help";
	char list[256], key[64];
	snprintf(key, sizeof key, "%.*s", (int)strcspn(spell + 2, "="), spell + 2);
	if (!strncmp(spell, "--", 2) && cli_closest(key, names, n, "--", list, sizeof list))
		return cli_usage_err(cmd->name, "unknown option '%s'; did you mean '%s'?", spell, list);
	return cli_usage_err(cmd->name, "unknown option '%s'", spell);
}

/* The option named by a (after "--", up to any "="): exact, or the only one it begins. */
static const struct cli_opt *find_long(const struct cli_opt *opts, const char *a, size_t len,
				       bool *ambiguous)
{
	const struct cli_opt *hit = NULL;
	*ambiguous = false;
	for (const struct cli_opt *o = opts; o->kind != CLI_END; o++) {
		if (!is_option(o) || strncmp(o->name, a, len))
			continue;
		if (!o->name[len]) { /* exact: "--keep" is not a prefix of "--keep-last" then */
			*ambiguous = false;
			return o;
		}
		*ambiguous = hit != NULL;
		hit = o;
	}
	return *ambiguous ? NULL : hit;
}

/* "option '--keep-w' is ambiguous (--keep-within, --keep-weekly)": the names it begins. */
static int ambiguous_option(const struct cli_cmd *cmd, const char *spell, const char *a,
			    size_t len)
{
	char list[256] = "";
	for (const struct cli_opt *o = cmd->opts; o->kind != CLI_END; o++)
		if (is_option(o) && !strncmp(o->name, a, len))
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s--%s",
				 list[0] ? ", " : "", o->name);
	return cli_usage_err(cmd->name, "option '%s' is ambiguous (%s)", spell, list);
}

/* argv[*i] is "--name[=value]". Returns -1 or an exit status; *i moves past a separate value. */
static int parse_long(const struct cli_cmd *cmd, void *args, int argc, char **argv, int *i)
{
	const char *a = argv[*i] + 2, *eq = strchr(a, '=');
	size_t len = eq ? (size_t)(eq - a) : strlen(a);
	char spell[80];
	snprintf(spell, sizeof spell, "--%.*s", (int)(len < 70 ? len : 70), a);
	if (len == 4 && !strncmp(a, "help", 4)) {
		cli_print_usage(stdout, cmd);
		return EXIT_OK;
	}
	bool amb;
	const struct cli_opt *o = find_long(cmd->opts, a, len, &amb);
	if (amb)
		return ambiguous_option(cmd, spell, a, len);
	if (!o)
		return unknown_option(cmd, argv[*i]);
	snprintf(spell, sizeof spell, "--%s", o->name);
	if (!takes_value(o)) {
		if (eq)
			return cli_usage_err(cmd->name, "option '%s' takes no value", spell);
		return store_value(cmd->name, o, spell, NULL, args);
	}
	if (eq)
		return store_value(cmd->name, o, spell, eq + 1, args);
	if (*i + 1 >= argc)
		return cli_usage_err(cmd->name, "option '%s' needs a value", spell);
	return store_value(cmd->name, o, spell, argv[++*i], args);
}

/* argv[*i] is "-xyz": flags, the last of which may take a value (the rest of the word, or the
 * next one). Returns -1 or an exit status. */
static int parse_short(const struct cli_cmd *cmd, void *args, int argc, char **argv, int *i)
{
	for (const char *p = argv[*i] + 1; *p; p++) {
		char spell[3] = {'-', *p, 0};
		if (*p == 'h') {
			cli_print_usage(stdout, cmd);
			return EXIT_OK;
		}
		const struct cli_opt *o = cmd->opts;
		while (o->kind != CLI_END && !(is_option(o) && o->short_name == *p))
			o++;
		if (o->kind == CLI_END)
			return cli_usage_err(cmd->name, "unknown option '%s'", spell);
		if (!takes_value(o)) {
			store_value(cmd->name, o, spell, NULL, args);
			continue;
		}
		if (p[1])
			return store_value(cmd->name, o, spell, p + 1, args);
		if (*i + 1 >= argc)
			return cli_usage_err(cmd->name, "option '%s' needs a value", spell);
		return store_value(cmd->name, o, spell, argv[++*i], args);
	}
	return -1;
}

int cli_parse_opts(const struct cli_cmd *cmd, void *args, int *argc, char **argv)
{
	int npos = 1, rc = -1;
	bool rest = false;
	for (int i = 1; i < *argc && rc < 0; i++) {
		const char *a = argv[i];
		if (rest || a[0] != '-' || !a[1]) {
			argv[npos++] = argv[i]; /* i >= npos: nothing unread is overwritten */
			continue;
		}
		if (!strcmp(a, "--"))
			rest = true;
		else if (a[1] == '-')
			rc = parse_long(cmd, args, *argc, argv, &i);
		else
			rc = parse_short(cmd, args, *argc, argv, &i);
	}
	if (rc >= 0)
		return rc;
	argv[npos] = NULL;
	*argc = npos;
	return -1;
}

int cli_take_opts(const struct cli_opt *opts, void *args, int *argc, char **argv)
{
	int out = 1;
	bool rest = false;
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '=');
		const struct cli_opt *o = NULL;
		rest = rest || !strcmp(a, "--");
		size_t len = eq ? (size_t)(eq - a) : strlen(a);
		for (const struct cli_opt *p = opts; !rest && !o && p->kind != CLI_END; p++)
			if (is_option(p) && !strncmp(a, "--", 2) && len == strlen(p->name) + 2 &&
			    !strncmp(a + 2, p->name, len - 2))
				o = p;
		if (!o) {
			argv[out++] = argv[i];
			continue;
		}
		char spell[80];
		snprintf(spell, sizeof spell, "--%s", o->name);
		const char *v = NULL;
		if (takes_value(o) && !eq && i + 1 >= *argc) {
			cli_err("option '%s' needs a value", spell);
			return EXIT_USAGE;
		}
		if (takes_value(o))
			v = eq ? eq + 1 : argv[++i];
		else if (eq) {
			cli_err("option '%s' takes no value", spell);
			return EXIT_USAGE;
		}
		int rc = store_value(cli_prog, o, spell, v, args);
		if (rc >= 0)
			return rc;
	}
	argv[out] = NULL;
	*argc = out;
	return -1;
}
