/* Shared layer of the libckpt command-line tools (ckptctl, nvmetune): the command table, error
 * reporting, size parsing and printing, a JSON writer and a progress bar. Tools reach the library
 * only through include/ckpt.h; nothing here depends on libckpt. The files, each using only those
 * before it: units.c (sizes, numbers, times), json.c, progress.c, msg.c (cli_prog, errors,
 * suggestions), usage.c (--help, completion), opt.c (the option parser), cli.c (dispatch). */
#ifndef CKPT_CLI_H
#define CKPT_CLI_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses shared by the tools (documented in their man pages). */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,     /* the operation failed, or verify found damage */
	EXIT_USAGE = 2,    /* bad command line */
	EXIT_BUSY = 3,     /* the store is locked by another writer */
	EXIT_NOTFOUND = 4, /* store, step or device does not exist */
};

/* A command-line option, declared once: the parser (cli_parse_opts), the command's --help
 * (cli_print_usage) and the shell completion (`TOOL __complete`) all read the same table, as
 * nvme-cli's argconfig and git's parse-options do. A table ends with an entry whose kind is
 * CLI_END. The value lands at offset off of the argument struct the command passes. */
enum cli_opt_kind {
	CLI_END = 0,
	CLI_FLAG,   /* no value; sets a bool */
	CLI_STRING, /* const char *: the argument as given */
	CLI_SIZE,   /* uint64_t: cli_parse_size() ("64K", "1M"), within min..max */
	CLI_U64,    /* uint64_t: cli_parse_u64(), within min..max */
	CLI_ENUM,   /* int: the index of the argument in values */
	CLI_CALL,   /* call(cmd, code, arg, target) parses and stores it, and reports its errors */
	CLI_GROUP,  /* not an option: help is the heading of the options that follow */
};
enum {
	CLI_REQUIRED = 1 << 0, /* shown without brackets in the synopsis (the command checks it) */
	CLI_POW2 = 1 << 1,     /* CLI_SIZE, CLI_U64: a power of two */
};
struct cli_opt {
	enum cli_opt_kind kind;
	const char *name;          /* long name, without the dashes */
	char short_name;           /* 0: none */
	size_t off;                /* of the target in the argument struct */
	const char *value;         /* the value's name in the help ("N", "FILE"); NULL: from values */
	const char *help;          /* lines separated by '\n' */
	const char *const *values; /* CLI_ENUM: the words taken; others: words to complete */
	uint64_t min, max;         /* CLI_SIZE, CLI_U64: the range (max 0: no upper bound) */
	const char *bad;           /* invalid value: a format with one %s (the value) */
	int (*call)(const char *cmd, int code, const char *arg, void *target);
	int code;                  /* CLI_CALL: passed to call */
	unsigned flags;            /* CLI_REQUIRED, CLI_POW2 */
	const char *complete;      /* values to complete: "@dir", "@file", "@file:EXT" or NULL */
	/* NULL, or prints further values to complete, one a line, read from what the command line
	 * names: argv[0..argc) are its positional arguments so far (`TOOL __complete CMD OPTION
	 * ARG...`). Prints nothing when they name nothing it can read. */
	void (*complete_fn)(int argc, char **argv);
};
/* The first fields of a table entry: {CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct a, json), NULL,
 * "help"), .values = ...}; CLI_AT(T, field) is the offset of the target in the struct T. */
#define CLI_OPT(k, l, s, o, v, h) \
	.kind = (k), .name = (l), .short_name = (s), .off = (o), .value = (v), .help = (h)
#define CLI_AT(T, field) offsetof(T, field)
#define CLI_OPT_END {.kind = CLI_END}

struct cli_cmd {
	const char *name;                 /* "list", or "raid create" for a subcommand */
	int (*fn)(int argc, char **argv); /* argv[0] is the command name */
	const char *help;                 /* one line for the command list */
	const char *usage;                /* full text for `TOOL CMD --help`, when opts is NULL */
	const char *args;                 /* positional arguments of the synopsis ("STORE [STEP]") */
	const char *desc;                 /* what the command does, after the synopsis */
	const struct cli_opt *opts;       /* its options; NULL: usage is the whole help */
	const char *tail;                 /* after the options: exit status, examples */
	const struct cli_cmd *const *subs; /* subcommands ("raid create"), NULL-terminated */
};

/* Options that every command of the tool takes (nvmetune's roots), or NULL: listed in each
 * command's --help and in the completion; the tool parses them itself. */
extern const struct cli_opt *cli_global_opts;

/* Parses the options of argv[1..*argc) by cmd->opts into the struct args, as getopt_long()
 * would: --name=value, --name value, an unambiguous prefix of a long name, -x value, -xvalue,
 * bundled short flags (-qa), "--" ending the options, "-" a positional argument, and -h/--help
 * (prints the usage). The positional arguments are moved, in order, to argv[1..*argc). An
 * unknown option (with the closest names), a missing or invalid value (naming the option) is
 * reported as a usage error of cmd. Returns -1 to go on, or the exit status to return. */
int cli_parse_opts(const struct cli_cmd *cmd, void *args, int *argc, char **argv);

/* Takes the options of opts (long names, exactly) out of argv[1..*argc) wherever they stand
 * before "--", into the struct args; the other words keep their order. For options that every
 * command takes. Returns -1 to go on, or the exit status of a usage error (reported). */
int cli_take_opts(const struct cli_opt *opts, void *args, int *argc, char **argv);

/* Prints the options of opts under heading (the table's own first group heading instead, when it
 * has one), then "-h, --help" when help. */
void cli_print_options(FILE *f, const struct cli_opt *opts, const char *heading, bool help);

/* Prints cmd's help: the synopsis and the options generated from its table, or its usage text. */
void cli_print_usage(FILE *f, const struct cli_cmd *cmd);

/* The closest of names[0..n) to name, git's way (see msg.c): writes "'a' or 'b'" (each quoted,
 * prefixed by pre) into buf and returns true, or returns false when none is close. */
bool cli_closest(const char *name, const char *const *names, size_t n, const char *pre,
		 char *buf, size_t len);

/* `TOOL __complete [CMD [SUB]] [OPTION [ARG...]]`, for the completion scripts: the commands; a
 * command's subcommands and options, one a line, "=" after those that take a value; or the values
 * of OPTION (words, "@dir", "@file", "@file:EXT", then what its complete_fn finds from the
 * positional arguments ARG... of the command line). Returns the exit status. */
int cli_complete(const struct cli_cmd *const *cmds, int argc, char **argv);

/* Name of the running tool, used as the prefix of every message ("ckptctl: ..."). */
extern const char *cli_prog;

/* Runs the command named by argv[1] from a NULL-terminated table. Handles `--help`, `-h`,
 * `help [CMD]`, `--version` and `__complete` (cli_complete). Returns the exit status. */
int cli_dispatch(const char *summary, const struct cli_cmd *const *cmds, int argc, char **argv);

/* If argv holds --help or -h (before "--"), prints cmd's usage on stdout and returns true. */
bool cli_want_help(const struct cli_cmd *cmd, int argc, char **argv);

/* Runs the subcommand of parent named by argv[1] (parent->subs); handles --help the same way.
 * Returns the exit status. */
int cli_dispatch_sub(const struct cli_cmd *parent, int argc, char **argv);

/* Prints "PROG: message" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "PROG: CMD: message" and a hint to run --help; returns EXIT_USAGE. */
int cli_usage_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses "1048576", "64K", "1M", "2G", "1MiB", "1.5G" (binary multiples). Returns 0 or -1. */
int cli_parse_size(const char *s, uint64_t *out);
/* Parses a non-negative decimal integer that must fit in uint64_t. Returns 0 or -1. */
int cli_parse_u64(const char *s, uint64_t *out);
/* Formats bytes in IEC units ("0 B", "1023 B", "1.5 KiB", "12.0 GiB") into buf; returns buf. */
const char *cli_fmt_iec(uint64_t bytes, char *buf, size_t len);
/* Formats a unix time as "YYYY-MM-DD HH:MM:SS" in UTC. */
const char *cli_fmt_time(int64_t unix_s, char *buf, size_t len);

/* A streaming JSON writer with correct escaping and comma placement. */
struct jw {
	FILE *f;
	int depth;
	bool need_comma[32];
	bool after_key;
	bool pretty;
};
void jw_init(struct jw *w, FILE *f, bool pretty);
void jw_obj_begin(struct jw *w);
void jw_obj_end(struct jw *w);
void jw_arr_begin(struct jw *w);
void jw_arr_end(struct jw *w);
void jw_key(struct jw *w, const char *k);
void jw_str(struct jw *w, const char *s);
void jw_strn(struct jw *w, const char *s, size_t n);
void jw_u64(struct jw *w, uint64_t v);
void jw_i64(struct jw *w, int64_t v);
void jw_dbl(struct jw *w, double v);
void jw_bool(struct jw *w, bool v);
void jw_null(struct jw *w);
/* Finishes the document with a newline. */
void jw_finish(struct jw *w);
/* Writes s as a JSON string literal (with quotes) to f. */
void json_put_string(FILE *f, const char *s, size_t n);

/* Progress on a terminal: a line on stderr (label, bar, share, bytes done of the total, rate,
 * time left), redrawn at most 10 times a second, each time over a cleared line; nothing when
 * stderr is not a terminal or when disabled. */
struct progress {
	bool on;
	bool drawn;        /* a line is on the terminal */
	const char *label;
	uint64_t total, done;
	double last_draw;
	double start;
};
void progress_start(struct progress *p, const char *label, uint64_t total, bool enable);
void progress_update(struct progress *p, uint64_t done);
/* Erases the line, so that other output may follow on a clean line; the next update redraws. */
void progress_clear(struct progress *p);
/* Erases the line for good. */
void progress_end(struct progress *p);
/* Erases the line of the progress shown now, if any (cli_err() calls it before a message). */
void progress_interrupt(void);

#endif
