/* Command dispatch shared by the CLIs: the command list, `help [CMD]`, --version, `__complete`,
 * unknown commands (with suggestions) and subcommands. The top of cli/common: it uses the help
 * and completion (usage.c) and the messages (msg.c); nothing of cli/common uses it. */
#include "cli.h"

#include <string.h>

#ifndef CKPT_VERSION_STRING
#define CKPT_VERSION_STRING "unknown"
#endif

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
