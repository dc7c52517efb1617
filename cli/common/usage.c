/* What an option table tells the user: a command's --help (synopsis, options section) and the
 * answers of `TOOL __complete` that the bash completion scripts ask for. */
#include "cli.h"

#include <string.h>

/* The synopsis wraps before this column. */
#define USAGE_WIDTH 96
/* The text of the options starts after the longest names up to this length; longer names have
 * their text on the next line, so that one long name does not push every text to the right. */
#define NAME_COLUMN 28

/* Set by the tool; here, not in opt.c, because only the help and the completion read it. */
const struct cli_opt *cli_global_opts;

static bool is_an_option(const struct cli_opt *o)
{
	return o->kind != CLI_END && o->kind != CLI_GROUP;
}

static bool has_options(const struct cli_opt *opts)
{
	for (const struct cli_opt *o = opts; o && o->kind != CLI_END; o++)
		if (is_an_option(o))
			return true;
	return false;
}

/* The value's name: o->value, or the allowed words joined by '|'. */
static const char *value_name(const struct cli_opt *o, char *buf, size_t len)
{
	if (o->value || !o->values)
		return o->value ? o->value : "VALUE";
	buf[0] = 0;
	for (int k = 0; o->values[k]; k++)
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", k ? "|" : "", o->values[k]);
	return buf;
}

/* "-x, --name VALUE" (or "    --name VALUE") into buf; returns its length. */
static size_t option_names(const struct cli_opt *o, char *buf, size_t len)
{
	char v[128];
	bool val = o->kind != CLI_FLAG;
	int n = snprintf(buf, len, "%c%c%s--%s%s%s", o->short_name ? '-' : ' ',
			 o->short_name ? o->short_name : ' ', o->short_name ? ", " : "  ", o->name,
			 val ? " " : "", val ? value_name(o, v, sizeof v) : "");
	return n < 0 ? 0 : (size_t)n;
}

static void synopsis(FILE *f, const struct cli_cmd *cmd, bool first)
{
	static const struct cli_opt none[] = {CLI_OPT_END};
	char line[512], v[128];
	int indent = snprintf(line, sizeof line, "%s %s %s ", first ? "Usage:" : "      ", cli_prog,
			      cmd->name);
	size_t used = (size_t)indent;
	/* The options, then the positional arguments, wrapped as a whole word each. */
	for (const struct cli_opt *o = cmd->opts ? cmd->opts : none;; o++) {
		char word[160];
		if (o->kind == CLI_END && !(cmd->args && *cmd->args))
			break;
		if (o->kind == CLI_GROUP)
			continue;
		bool req = o->flags & CLI_REQUIRED;
		if (o->kind == CLI_END)
			snprintf(word, sizeof word, "%s", cmd->args);
		else
			snprintf(word, sizeof word, "%s--%s%s%s%s", req ? "" : "[", o->name,
				 o->kind != CLI_FLAG ? " " : "",
				 o->kind != CLI_FLAG ? value_name(o, v, sizeof v) : "", req ? "" : "]");
		if (used + strlen(word) > USAGE_WIDTH && used > (size_t)indent) {
			line[used - 1] = 0;
			fprintf(f, "%s\n", line);
			used = (size_t)snprintf(line, sizeof line, "%*s", indent, "");
		}
		used += (size_t)snprintf(line + used, sizeof line - used, "%s ", word);
		if (o->kind == CLI_END)
			break;
	}
	line[used - 1] = 0;
	fprintf(f, "%s\n", line);
}

/* One option: its names, then its help lines from column col. */
static void option_line(FILE *f, const struct cli_opt *o, size_t col)
{
	char names[192];
	size_t n = option_names(o, names, sizeof names);
	const char *h = o->help ? o->help : "";
	size_t hl = strcspn(h, "\n");
	if (n + 2 > col - 2) /* too long for the column: the text starts on the next line */
		fprintf(f, "  %s\n%*s%.*s\n", names, (int)col, "", (int)hl, h);
	else
		fprintf(f, "  %-*s%.*s\n", (int)(col - 2), names, (int)hl, h);
	for (h += hl; *h == '\n'; h += hl) {
		h++;
		hl = strcspn(h, "\n");
		fprintf(f, "%*s%.*s\n", (int)col, "", (int)hl, h);
	}
}

static size_t name_column(const struct cli_opt *opts)
{
	size_t w = strlen("-h, --help");
	char names[192];
	for (const struct cli_opt *o = opts; o && o->kind != CLI_END; o++) {
		size_t n = is_an_option(o) ? option_names(o, names, sizeof names) : 0;
		if (n > w && n <= NAME_COLUMN)
			w = n;
	}
	return 2 + w + 3;
}

void cli_print_options(FILE *f, const struct cli_opt *opts, const char *heading, bool help)
{
	size_t col = name_column(opts);
	if (!help && !has_options(opts))
		return;
	if (!opts || opts->kind != CLI_GROUP)
		fprintf(f, "\n%s\n", heading);
	for (const struct cli_opt *o = opts; o && o->kind != CLI_END; o++) {
		if (o->kind == CLI_GROUP)
			fprintf(f, "\n%s\n", o->help);
		else
			option_line(f, o, col);
	}
	if (help)
		fprintf(f, "  %-*s%s\n", (int)(col - 2), "-h, --help", "show this help");
}

/* One section per run of subcommands that share a table: "Options of raid stop, raid add:". */
static void subcommand_options(FILE *f, const struct cli_cmd *const *subs)
{
	for (int k = 0; subs[k];) {
		char head[256];
		int end = k + 1;
		snprintf(head, sizeof head, "Options of %s", subs[k]->name);
		for (; subs[end] && subs[end]->opts == subs[k]->opts; end++)
			snprintf(head + strlen(head), sizeof head - strlen(head), ", %s", subs[end]->name);
		snprintf(head + strlen(head), sizeof head - strlen(head), ":");
		cli_print_options(f, subs[k]->opts, head, !subs[end]);
		k = end;
	}
}

void cli_print_usage(FILE *f, const struct cli_cmd *cmd)
{
	if (!cmd->opts && !cmd->subs) {
		fputs(cmd->usage ? cmd->usage : "", f);
		return;
	}
	if (cmd->subs)
		for (int k = 0; cmd->subs[k]; k++)
			synopsis(f, cmd->subs[k], k == 0);
	else
		synopsis(f, cmd, true);
	if (cmd->desc)
		fputs(cmd->desc, f);
	if (cmd->subs)
		subcommand_options(f, cmd->subs);
	else
		cli_print_options(f, cmd->opts, "Options:", true);
	if (cli_global_opts)
		cli_print_options(f, cli_global_opts, "Options for every command:", false);
	if (cmd->tail)
		fputs(cmd->tail, f);
}

static void complete_options(FILE *f, const struct cli_opt *opts)
{
	for (const struct cli_opt *o = opts; o && o->kind != CLI_END; o++) {
		if (!is_an_option(o))
			continue;
		fprintf(f, "--%s%s\n", o->name, o->kind != CLI_FLAG ? "=" : "");
		if (o->short_name)
			fprintf(f, "-%c%s\n", o->short_name, o->kind != CLI_FLAG ? "=" : "");
	}
}

static const struct cli_opt *find_option(const struct cli_opt *opts, const char *word)
{
	for (const struct cli_opt *o = opts; o && o->kind != CLI_END; o++)
		if (is_an_option(o) &&
		    ((word[1] == '-' && !strcmp(word + 2, o->name)) ||
		     (word[1] == o->short_name && !word[2])))
			return o;
	return NULL;
}

int cli_complete(const struct cli_cmd *const *cmds, int argc, char **argv)
{
	const struct cli_cmd *const *list = cmds, *cmd = NULL;
	int i = 1;
	/* Down the command words: a command, then a subcommand of it. */
	for (; i < argc && argv[i][0] != '-'; i++) {
		const struct cli_cmd *hit = NULL;
		for (int k = 0; list && list[k] && !hit; k++) {
			const char *sp = strrchr(list[k]->name, ' ');
			if (!strcmp(sp ? sp + 1 : list[k]->name, argv[i]))
				hit = list[k];
		}
		if (!hit)
			return EXIT_USAGE;
		cmd = hit;
		list = cmd->subs;
	}
	if (i < argc) { /* the values of an option */
		const struct cli_opt *o = cmd ? find_option(cmd->opts, argv[i]) : NULL;
		if (!o)
			o = find_option(cli_global_opts, argv[i]);
		if (!o)
			return EXIT_USAGE;
		for (int k = 0; o->values && o->values[k]; k++)
			printf("%s\n", o->values[k]);
		if (o->complete)
			printf("%s\n", o->complete);
		if (o->complete_fn) {
			fflush(stdout);
			o->complete_fn(argc - i - 1, argv + i + 1);
		}
		return EXIT_OK;
	}
	for (int k = 0; list && list[k]; k++) {
		const char *sp = strrchr(list[k]->name, ' ');
		printf("%s\n", sp ? sp + 1 : list[k]->name);
	}
	if (cmd) {
		complete_options(stdout, cmd->opts);
		printf("--help\n-h\n");
	}
	complete_options(stdout, cli_global_opts);
	return EXIT_OK;
}
