/* Command dispatch and messages shared by the CLIs. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef CKPT_VERSION_STRING
#define CKPT_VERSION_STRING "unknown"
#endif

const char *cli_prog = "ckpt";

void cli_err(const char *fmt, ...)
{
	va_list ap;
	progress_interrupt(); /* a message never lands on the end of a progress line */
	fprintf(stderr, "%s: ", cli_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cli_usage_err(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: %s: ", cli_prog, cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s %s --help'.\n", cli_prog, cmd);
	return EXIT_USAGE;
}

static void list_commands(FILE *f, const char *summary, const struct cli_cmd *const *cmds)
{
	fprintf(f, "Usage: %s COMMAND [ARGS...]\n%s\n\nCommands:\n", cli_prog, summary);
	for (const struct cli_cmd *const *c = cmds; *c; c++)
		fprintf(f, "  %-10s %s\n", (*c)->name, (*c)->help);
	fprintf(f, "\nRun '%s COMMAND --help' for a command's options.\n", cli_prog);
}

static const struct cli_cmd *find_cmd(const struct cli_cmd *const *cmds, const char *name)
{
	for (const struct cli_cmd *const *c = cmds; *c; c++)
		if (!strcmp((*c)->name, name))
			return *c;
	return NULL;
}

bool cli_want_help(const struct cli_cmd *cmd, int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			cli_print_usage(stdout, cmd);
			return true;
		}
	}
	return false;
}

/* Edit distance with transpositions (optimal string alignment), capped: a > 3 is "far". */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 32 || lb > 32)
		return 99;
	size_t d[33][33];
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			size_t v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[la][lb];
}

/* How far name is from cand: a prefix of it counts as 1. */
static size_t closeness(const char *name, const char *cand)
{
	size_t len = strlen(name);
	return len && !strncmp(cand, name, len) ? 1 : edit_distance(name, cand);
}

/* As git suggests commands: those at the smallest edit distance, when it is at most 2 (1 for
 * names of up to 3 letters), or that the name begins. */
bool cli_closest(const char *name, const char *const *names, size_t n, const char *pre,
		 char *buf, size_t len)
{
	size_t best = 99, nlen = strlen(name), used = 0;
	for (size_t k = 0; k < n; k++)
		if (closeness(name, names[k]) < best)
			best = closeness(name, names[k]);
	buf[0] = 0;
	if (best > (nlen <= 3 ? 1u : 2u))
		return false;
	for (size_t k = 0; k < n; k++) {
		if (closeness(name, names[k]) != best)
			continue;
		int w = snprintf(buf + used, len - used, "%s%s%s", used ? "' or '" : "", pre, names[k]);
		if (w < 0 || (size_t)w >= len - used) {
			buf[used] = 0; /* the list is full: keep the names that fit */
			break;
		}
		used += (size_t)w;
	}
	return used > 0;
}

static int unknown_command(const struct cli_cmd *const *cmds, const char *name)
{
	const char *names[64];
	size_t n = 0;
	for (const struct cli_cmd *const *c = cmds; *c && n < 64; c++) {
		const char *sp = strrchr((*c)->name, ' '); /* a subcommand by its own word */
		names[n++] = sp ? sp + 1 : (*c)->name;
	}
	char list[256];
	if (cli_closest(name, names, n, "", list, sizeof list))
		cli_err("unknown command '%s'; did you mean '%s'? (run '%s --help' for the list)", name,
			list, cli_prog);
	else
		cli_err("unknown command '%s'; run '%s --help' for the list", name, cli_prog);
	return EXIT_USAGE;
}

int cli_dispatch(const char *summary, const struct cli_cmd *const *cmds, int argc, char **argv)
{
	if (argc < 2) {
		list_commands(stderr, summary, cmds);
		return EXIT_USAGE;
	}
	const char *name = argv[1];
	if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
		list_commands(stdout, summary, cmds);
		return EXIT_OK;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "version")) {
		printf("%s %s\n", cli_prog, CKPT_VERSION_STRING);
		return EXIT_OK;
	}
	if (!strcmp(name, "__complete"))
		return cli_complete(cmds, argc - 1, argv + 1);
	if (!strcmp(name, "help")) {
		if (argc < 3) {
			list_commands(stdout, summary, cmds);
			return EXIT_OK;
		}
		const struct cli_cmd *c = find_cmd(cmds, argv[2]);
		if (!c)
			return unknown_command(cmds, argv[2]);
		cli_print_usage(stdout, c);
		return EXIT_OK;
	}
	const struct cli_cmd *c = find_cmd(cmds, name);
	if (!c)
		return unknown_command(cmds, name);
	if (cli_want_help(c, argc - 1, argv + 1))
		return EXIT_OK;
	return c->fn(argc - 1, argv + 1);
}

int cli_parse_u64(const char *s, uint64_t *out)
{
	/* Digits only: strtoull alone would take " 7" (leading space) or "+7" for 7. */
	if (!s || *s < '0' || *s > '9')
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
	if (!s || ((*s < '0' || *s > '9') && *s != '.'))
		return -1;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -1;
	uint64_t mult = 1;
	switch (*end) {
	case 'k': case 'K': mult = 1ull << 10; end++; break;
	case 'm': case 'M': mult = 1ull << 20; end++; break;
	case 'g': case 'G': mult = 1ull << 30; end++; break;
	case 't': case 'T': mult = 1ull << 40; end++; break;
	case 'b': case 'B': if (end[1] == 0) end++; break;
	default: break;
	}
	if (mult > 1 && (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib")))
		end += strlen(end);
	if (*end)
		return -1;
	double r = v * (double)mult;
	if (r >= 18446744073709551615.0)
		return -1;
	if (mult == 1 && r != (double)(uint64_t)r)
		return -1;
	*out = (uint64_t)r;
	return 0;
}

const char *cli_fmt_iec(uint64_t bytes, char *buf, size_t len)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	if (bytes < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	double v = (double)bytes;
	int u = 0;
	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

const char *cli_fmt_time(int64_t unix_s, char *buf, size_t len)
{
	time_t t = (time_t)unix_s;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%lld", (long long)unix_s);
	return buf;
}

int cli_dispatch_sub(const struct cli_cmd *parent, int argc, char **argv)
{
	char names[256] = "", list[256] = ""; /* "a, b or c" and "a, b, c" */
	int n = 0;
	while (parent->subs[n])
		n++;
	for (int k = 0; k < n; k++) {
		const char *sp = strrchr(parent->subs[k]->name, ' ');
		const char *w = sp ? sp + 1 : parent->subs[k]->name;
		if (argc >= 2 && !strcmp(argv[1], w)) {
			if (cli_want_help(parent->subs[k], argc - 1, argv + 1))
				return EXIT_OK;
			return parent->subs[k]->fn(argc - 1, argv + 1);
		}
		snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
			 k == 0 ? "" : k == n - 1 ? " or " : ", ", w);
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", w);
	}
	if (argc < 2)
		return cli_usage_err(parent->name, "expected %s", names);
	return cli_usage_err(parent->name, "unknown subcommand '%s' (%s)", argv[1], list);
}
