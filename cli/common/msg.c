/* Messages of the tools: the tool's name (cli_prog), errors and usage errors on stderr, and the
 * "did you mean" suggestions (cli_closest) that the option parser and the dispatcher add to them.
 * Above progress.c only: a message first erases the progress line. */
#include "cli.h"

#include <string.h>

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
