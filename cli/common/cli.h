/* Shared layer of the libckpt command-line tools (ckptctl, nvmetune): the command table, error
 * reporting, size parsing and printing, a JSON writer and a progress bar. Tools reach the library
 * only through include/ckpt.h; nothing here depends on libckpt. */
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

struct cli_cmd {
	const char *name;
	int (*fn)(int argc, char **argv); /* argv[0] is the command name */
	const char *help;                 /* one line for the command list */
	const char *usage;                /* full text for `TOOL CMD --help` */
};

/* Name of the running tool, used as the prefix of every message ("ckptctl: ..."). */
extern const char *cli_prog;

/* Runs the command named by argv[1] from a table ending with a {NULL} entry. Handles
 * `--help`, `-h`, `help [CMD]` and `--version`. Returns the exit status. */
int cli_dispatch(const char *summary, const struct cli_cmd *cmds, int argc, char **argv);

/* If argv holds --help or -h, prints cmd's usage on stdout and returns true. */
bool cli_want_help(const struct cli_cmd *cmd, int argc, char **argv);

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
