/* The option tables of cli/common: cli_parse_opts() against one table of every kind (--opt=value,
 * --opt value, prefixes, -x value, -xvalue, bundled flags, "--", "-", unknown options with the
 * closest names, missing and invalid values), the --help made from the table, cli_take_opts()
 * and the answers of __complete. Messages go to stderr, which is caught in a temporary file. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct args {
	bool json, quiet, all, keep_all;
	const char *out;
	uint64_t size, level;
	int mode;
	int calls;
	const char *last_call;
};

static int on_call(const char *cmd, int code, const char *arg, void *target)
{
	struct args *a = target;
	if (!strcmp(arg, "bad"))
		return cli_usage_err(cmd, "call %d refused '%s'", code, arg);
	a->calls++;
	a->last_call = arg;
	return 0;
}

static const char *const modes[] = {"fast", "safe", NULL};

static const struct cli_opt opts[] = {
	{.kind = CLI_GROUP, .help = "Output:"},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct args, json), NULL, "print JSON")},
	{CLI_OPT(CLI_FLAG, "quiet", 'q', CLI_AT(struct args, quiet), NULL, "print less")},
	{CLI_OPT(CLI_FLAG, "all", 'a', CLI_AT(struct args, all), NULL, "every one")},
	{CLI_OPT(CLI_STRING, "output", 'o', CLI_AT(struct args, out), "FILE", "where\nto write"),
	 .flags = CLI_REQUIRED, .complete = "@file"},
	{.kind = CLI_GROUP, .help = "Tuning:"},
	{CLI_OPT(CLI_SIZE, "size", 0, CLI_AT(struct args, size), "SIZE", "a size"),
	 .min = 4096, .flags = CLI_POW2},
	{CLI_OPT(CLI_U64, "level", 'l', CLI_AT(struct args, level), "N", "1 to 9"),
	 .min = 1, .max = 9, .bad = "bad level '%s': 1 to 9"},
	{CLI_OPT(CLI_ENUM, "mode", 0, CLI_AT(struct args, mode), NULL, "how"), .values = modes},
	{CLI_OPT(CLI_FLAG, "keep-all", 0, CLI_AT(struct args, keep_all), NULL, "all")},
	{CLI_OPT(CLI_FLAG, "keep-old", 0, CLI_AT(struct args, keep_all), NULL, "old")},
	{CLI_OPT(CLI_CALL, "keep", 'k', 0, "X", "repeatable"), .call = on_call, .code = 7},
	CLI_OPT_END,
};

static const struct cli_cmd cmd = {
	.name = "tst", .args = "STORE...", .opts = opts, .desc = "Tests the tables.\n",
	.tail = "\nThe end.\n",
};
static const struct cli_cmd *const cmds[] = {&cmd, NULL};

static int failures;
static char err[8192];

#define CHECK(cond)                                                                 \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stdout, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                 \
		}                                                                   \
	} while (0)

/* Runs fn with stderr (or stdout when out) caught into err. */
static int caught(bool out, int (*fn)(void *), void *arg)
{
	FILE *t = tmpfile();
	if (!t)
		abort();
	FILE *f = out ? stdout : stderr;
	fflush(f);
	int fd = fileno(f), saved = dup(fd);
	dup2(fileno(t), fd);
	int rc = fn(arg);
	fflush(f);
	dup2(saved, fd);
	close(saved);
	rewind(t);
	size_t n = fread(err, 1, sizeof err - 1, t);
	err[n] = 0;
	fclose(t);
	return rc;
}

struct run {
	int argc;
	char *argv[16];
	struct args a;
};

static int do_parse(void *p)
{
	struct run *r = p;
	return cli_parse_opts(&cmd, &r->a, &r->argc, r->argv);
}

/* Parses the words of line (split at spaces) after "tst"; returns cli_parse_opts()'s result. */
static int parse(struct run *r, char *line, bool out)
{
	memset(r, 0, sizeof *r);
	r->argv[r->argc++] = "tst";
	for (char *w = strtok(line, " "); w && r->argc < 15; w = strtok(NULL, " "))
		r->argv[r->argc++] = w;
	r->argv[r->argc] = NULL;
	return caught(out, do_parse, r);
}

static void test_forms(void)
{
	struct run r;
	char l1[] = "--json st1 --output=a -o b --size 8K -l3 st2 -- -q --json";
	CHECK(parse(&r, l1, false) == -1);
	CHECK(r.a.json && !r.a.quiet && !strcmp(r.a.out, "b") && r.a.size == 8192 && r.a.level == 3);
	CHECK(r.argc == 5 && !strcmp(r.argv[1], "st1") && !strcmp(r.argv[2], "st2") &&
	      !strcmp(r.argv[3], "-q") && !strcmp(r.argv[4], "--json") && !r.argv[5]);
	char l2[] = "-qa -ofile - --mo safe --keep x -ky";
	CHECK(parse(&r, l2, false) == -1);
	CHECK(r.a.quiet && r.a.all && !strcmp(r.a.out, "file") && r.a.mode == 1);
	CHECK(r.a.calls == 2 && !strcmp(r.a.last_call, "y"));
	CHECK(r.argc == 2 && !strcmp(r.argv[1], "-"));
	char l3[] = "-qlo";
	CHECK(parse(&r, l3, false) == EXIT_USAGE); /* -l takes "o" as its value: not a number */
	CHECK(strstr(err, "bad level 'o': 1 to 9"));
}

static void test_errors(void)
{
	struct run r;
	char l1[] = "--jsno";
	CHECK(parse(&r, l1, false) == EXIT_USAGE);
	CHECK(strstr(err, "tst: unknown option '--jsno'; did you mean '--json'?"));
	CHECK(strstr(err, "Try 'ckpt tst --help'."));
	char l2[] = "--frobnicate=3";
	CHECK(parse(&r, l2, false) == EXIT_USAGE);
	CHECK(strstr(err, "unknown option '--frobnicate=3'\n"));
	char l3[] = "x --output";
	CHECK(parse(&r, l3, false) == EXIT_USAGE);
	CHECK(strstr(err, "option '--output' needs a value"));
	char l4[] = "-o";
	CHECK(parse(&r, l4, false) == EXIT_USAGE);
	CHECK(strstr(err, "option '-o' needs a value"));
	char l5[] = "--size 6K";
	CHECK(parse(&r, l5, false) == EXIT_USAGE);
	CHECK(strstr(err, "invalid value '6K' for --size"));
	char l6[] = "--size 2K";
	CHECK(parse(&r, l6, false) == EXIT_USAGE);
	char l7[] = "--level 10";
	CHECK(parse(&r, l7, false) == EXIT_USAGE);
	CHECK(strstr(err, "bad level '10': 1 to 9"));
	char l8[] = "--mode slow";
	CHECK(parse(&r, l8, false) == EXIT_USAGE);
	CHECK(strstr(err, "invalid value 'slow' for --mode"));
	char l9[] = "--json=1";
	CHECK(parse(&r, l9, false) == EXIT_USAGE);
	CHECK(strstr(err, "option '--json' takes no value"));
	char l10[] = "-x";
	CHECK(parse(&r, l10, false) == EXIT_USAGE);
	CHECK(strstr(err, "unknown option '-x'"));
	char l11[] = "--keep bad";
	CHECK(parse(&r, l11, false) == EXIT_USAGE);
	CHECK(strstr(err, "call 7 refused 'bad'"));
	/* "--s" begins "size" only; "--" alone ends the options; a prefix of two is ambiguous. */
	char l12[] = "--s 4K";
	CHECK(parse(&r, l12, false) == -1 && r.a.size == 4096);
	char l13[] = "--l 2";
	CHECK(parse(&r, l13, false) == -1 && r.a.level == 2);
	char l14[] = "--mo fast --a";
	CHECK(parse(&r, l14, false) == -1 && r.a.all);
	/* A name that is also the prefix of others (--keep; --keep-all, --keep-old) is itself;
	 * "--kee" is ambiguous. */
	char l15[] = "--keep 5 --keep-a";
	CHECK(parse(&r, l15, false) == -1 && r.a.calls == 1 && r.a.keep_all);
	char l16[] = "--kee 5";
	CHECK(parse(&r, l16, false) == EXIT_USAGE);
	CHECK(strstr(err, "option '--kee' is ambiguous (--keep-all, --keep-old, --keep)"));
}

static void test_help(void)
{
	struct run r;
	char l1[] = "--bogus-later --help";
	CHECK(parse(&r, l1, false) == EXIT_USAGE); /* the first problem wins, as getopt's loop did */
	CHECK(strstr(err, "unknown option '--bogus-later'"));
	char l2[] = "x -h";
	CHECK(parse(&r, l2, true) == EXIT_OK);
	CHECK(strstr(err, "Usage: ckpt tst [--json] [--quiet] [--all] --output FILE [--size SIZE]"));
	CHECK(strstr(err, "[--mode fast|safe] [--keep-all] [--keep-old] [--keep X] STORE...\n"
			  "Tests the tables.\n\nOutput:\n"));
	/* The text column: after the longest names ("    --mode fast|safe"), for every line. */
	CHECK(strstr(err, "\nOutput:\n      --json             print JSON\n"));
	CHECK(strstr(err, "\n  -o, --output FILE      where\n                         to write\n"));
	CHECK(strstr(err, "\n\nTuning:\n      --size SIZE        a size\n"));
	CHECK(strstr(err, "\n      --mode fast|safe   how\n"));
	CHECK(strstr(err, "\n  -h, --help             show this help\n\nThe end.\n"));
}

static int do_complete_cmd(void *p)
{
	char *argv[] = {"__complete", "tst", NULL};
	return cli_complete(cmds, 2, argv);
}

static int do_complete_values(void *p)
{
	char *argv[] = {"__complete", "tst", p, NULL};
	return cli_complete(cmds, 3, argv);
}

static void test_complete(void)
{
	CHECK(caught(true, do_complete_cmd, NULL) == EXIT_OK);
	CHECK(!strcmp(err, "--json\n--quiet\n-q\n--all\n-a\n--output=\n-o=\n--size=\n--level=\n"
			   "-l=\n--mode=\n--keep-all\n--keep-old\n--keep=\n-k=\n"
			   "--help\n-h\n"));
	CHECK(caught(true, do_complete_values, "--mode") == EXIT_OK && !strcmp(err, "fast\nsafe\n"));
	CHECK(caught(true, do_complete_values, "-o") == EXIT_OK && !strcmp(err, "@file\n"));
	CHECK(caught(true, do_complete_values, "--nope") == EXIT_USAGE);
}

struct globals {
	bool json;
	const char *root;
};

static void test_take(void)
{
	static const struct cli_opt g[] = {
		{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct globals, json), NULL, "JSON")},
		{CLI_OPT(CLI_STRING, "root", 0, CLI_AT(struct globals, root), "DIR", "root")},
		CLI_OPT_END,
	};
	struct globals v = {0};
	char *argv[] = {"t", "cmd", "--root", "/r", "-x", "--json", "--jsonx", "--", "--json", NULL};
	int argc = 9;
	CHECK(cli_take_opts(g, &v, &argc, argv) == -1);
	CHECK(v.json && !strcmp(v.root, "/r") && argc == 6);
	CHECK(!strcmp(argv[1], "cmd") && !strcmp(argv[2], "-x") && !strcmp(argv[3], "--jsonx") &&
	      !strcmp(argv[4], "--") && !strcmp(argv[5], "--json") && !argv[6]);
}

int main(void)
{
	test_forms();
	test_errors();
	test_help();
	test_complete();
	test_take();
	printf("%d failed\n", failures);
	return failures ? 1 : 0;
}
