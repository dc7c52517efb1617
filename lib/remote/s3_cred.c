/* credential_process of a profile (~/.aws/config), as the AWS CLI runs it: the command prints a
 * JSON object {"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken" (optional),
 * "Expiration" (optional, ISO 8601)} on its standard output. Credentials that expire are fetched
 * again by s3_cred_current() before they do (docs/remote-s3.md).
 *
 * The command line often holds secrets (a token, a vault path) and its messages end up in job
 * logs: an error names the profile and the program's base name only, never the command line, and
 * quotes at most the first line of the process's standard error (its own words on why it failed;
 * the rest, which may echo its arguments or the keys, is read and dropped, never passed on). */
#include "remote/s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

#define CRED_OUT_MAX (64u << 10) /* bytes of the process's output read at most */
#define CRED_MARGIN_S 300        /* fetched again this long before they expire */

/* Where the value of key "name" starts in js (after the ':' and blanks), or NULL. The object a
 * credential process prints is flat, so a key is found by its quoted name before a ':'. */
static const char *json_value(const char *js, const char *name)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\"", name);
	for (const char *p = js; (p = strstr(p, pat)); p++) {
		const char *q = p + strlen(pat);
		while (isspace((unsigned char)*q))
			q++;
		if (*q != ':')
			continue; /* the name as a value, not a key */
		for (q++; isspace((unsigned char)*q);)
			q++;
		return q;
	}
	return NULL;
}

/* The string value of key name, unescaped, into out. Returns its length, -1 when absent, -2 when
 * not a string, not closed, too long or with an escape credentials never hold (\u). */
static int json_str(const char *js, const char *name, char *out, size_t outsz)
{
	const char *q = json_value(js, name);
	if (!q)
		return -1;
	if (*q++ != '"')
		return -2;
	size_t o = 0;
	for (; *q && *q != '"'; q++) {
		char ch = *q;
		if (ch == '\\') {
			switch (*++q) {
			case '"': case '\\': case '/': ch = *q; break;
			case 'n': ch = '\n'; break;
			case 't': ch = '\t'; break;
			case 'r': ch = '\r'; break;
			case 'b': ch = '\b'; break;
			case 'f': ch = '\f'; break;
			default: return -2;
			}
		}
		if (o + 1 >= outsz)
			return -2;
		out[o++] = ch;
	}
	if (*q != '"')
		return -2;
	out[o] = 0;
	return (int)o;
}

/* "2026-12-02T13:30:20Z", with optional fractions and a +HH:MM / -HH:MM offset, in unix
 * seconds; 0 when malformed. */
static int64_t iso_time(const char *s)
{
	int64_t t = s3_xml_time(s);
	if (!t)
		return 0;
	const char *p = s + 19;
	if (*p == '.')
		for (p++; isdigit((unsigned char)*p);)
			p++;
	int hh, mm, n = 0;
	if ((*p == 'Z' || *p == 'z') && !p[1])
		return t;
	if ((*p == '+' || *p == '-') && sscanf(p + 1, "%2d:%2d%n", &hh, &mm, &n) == 2 && !p[1 + n])
		return t - (*p == '+' ? 1 : -1) * (int64_t)(hh * 3600 + mm * 60);
	return 0;
}

/* The program of command line cmd for messages: the base name of its first word, quotes
 * dropped, at most 63 bytes; never an argument. */
static void prog_name(const char *cmd, char *out, size_t outsz)
{
	while (isspace((unsigned char)*cmd))
		cmd++;
	size_t n = 0;
	for (const char *p = cmd; *p && !isspace((unsigned char)*p); p++) {
		if (*p == '/')
			n = 0; /* a directory: the name starts after it */
		else if (*p != '\'' && *p != '"' && n + 1 < outsz)
			out[n++] = *p;
	}
	out[n] = 0;
	if (!n)
		snprintf(out, outsz, "(empty)");
}

/* The first line of the process's standard error, printable bytes only, for a message. */
static void first_line(const char *err, char *out, size_t outsz)
{
	size_t n = 0;
	for (const char *p = err; *p && *p != '\n' && n + 1 < outsz; p++)
		out[n++] = isprint((unsigned char)*p) ? *p : '?';
	while (n && isspace((unsigned char)out[n - 1]))
		n--;
	out[n] = 0;
}

/* Reads fd into buf (at most max bytes kept, the rest read and dropped) until end of file. One
 * of the two pipes of run_cmd; returns 1 while it is open, 0 at its end. */
static int drain(int fd, char *buf, size_t *n, size_t max)
{
	char sink[4096];
	ssize_t got = *n < max ? read(fd, buf + *n, max - *n) : read(fd, sink, sizeof sink);
	if (got < 0 && (errno == EINTR || errno == EAGAIN))
		return 1;
	if (got <= 0)
		return 0;
	if (*n < max)
		*n += (size_t)got;
	return 1;
}

/* Starts /bin/sh -c cmd with its standard output and error on pipes (*out_fd, *err_fd). */
static int spawn(const char *cmd, pid_t *pid, int *out_fd, int *err_fd)
{
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC))
		return -errno;
	if (pipe2(pe, O_CLOEXEC)) {
		int e = errno;
		close(po[0]), close(po[1]);
		return -e;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	char *argv[] = { "sh", "-c", (char *)cmd, NULL };
	int e = posix_spawn(pid, "/bin/sh", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(po[1]), close(pe[1]);
	if (e) {
		close(po[0]), close(pe[0]);
		return -e;
	}
	*out_fd = po[0], *err_fd = pe[0];
	return 0;
}

/* Runs c's credential_process and returns its standard output (malloc'd, NUL-terminated) in
 * *out. */
static int run_cmd(const struct s3_conf *c, const char *prog, char **out)
{
	char *buf = malloc(CRED_OUT_MAX + 1), err[1024];
	if (!buf)
		return ckpt_fail(CKPT_E_NOMEM, "credential_process of profile '%s': out of memory",
				 c->profile);
	pid_t pid;
	int ofd = -1, efd = -1, e = spawn(c->cred_process, &pid, &ofd, &efd);
	if (e) {
		free(buf);
		return ckpt_fail(CKPT_E_PERM, "credential_process of profile '%s' (%s): cannot run "
				 "it: %s", c->profile, prog, strerror(-e));
	}
	size_t n = 0, en = 0;
	struct pollfd p[2] = { { .fd = ofd, .events = POLLIN }, { .fd = efd, .events = POLLIN } };
	/* Both pipes at once: a process that fills one while we wait on the other must not hang. */
	while (p[0].fd >= 0 || p[1].fd >= 0) {
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].fd >= 0 && p[0].revents && !drain(ofd, buf, &n, CRED_OUT_MAX))
			p[0].fd = -1;
		if (p[1].fd >= 0 && p[1].revents && !drain(efd, err, &en, sizeof err - 1))
			p[1].fd = -1;
	}
	close(ofd), close(efd);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	err[en] = 0;
	buf[n] = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		char line[256];
		first_line(err, line, sizeof line);
		free(buf);
		return ckpt_fail(CKPT_E_PERM, "credential_process of profile '%s' (%s) failed: %s %d%s%s",
				 c->profile, prog, WIFEXITED(st) ? "exit status" : "signal",
				 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), line[0] ? ": " : "",
				 line);
	}
	*out = buf;
	return 0;
}

/* The credentials in the process's output js into c (all or nothing). */
static int parse_creds(const char *js, const char *prog, struct s3_conf *c)
{
	char ak[sizeof c->access_key], sk[sizeof c->secret_key], tok[sizeof c->token], exp[64];
	const char *v = json_value(js, "Version"), *bad = NULL;
	int t;
	if (!v || strtol(v, NULL, 10) != 1 || !isdigit((unsigned char)*v))
		bad = "no \"Version\": 1";
	else if (json_str(js, "AccessKeyId", ak, sizeof ak) <= 0)
		bad = "no usable \"AccessKeyId\"";
	else if (json_str(js, "SecretAccessKey", sk, sizeof sk) <= 0)
		bad = "no usable \"SecretAccessKey\"";
	else if ((t = json_str(js, "SessionToken", tok, sizeof tok)) == -2)
		bad = "a \"SessionToken\" that is not a usable string";
	int64_t when = 0;
	int e = bad ? 0 : json_str(js, "Expiration", exp, sizeof exp);
	if (!bad && (e == -2 || (e >= 0 && !(when = iso_time(exp)))))
		bad = "an \"Expiration\" that is not an ISO 8601 time";
	if (bad)
		return ckpt_fail(CKPT_E_PERM, "credential_process of profile '%s' (%s) printed %s",
				 c->profile, prog, bad);
	strcpy(c->access_key, ak);
	strcpy(c->secret_key, sk);
	strcpy(c->token, t > 0 ? tok : "");
	c->expires = when;
	return 0;
}

int s3_cred_process(struct s3_conf *c)
{
	char *js, prog[64];
	prog_name(c->cred_process, prog, sizeof prog);
	int rc = run_cmd(c, prog, &js);
	if (rc)
		return rc;
	rc = parse_creds(js, prog, c);
	free(js);
	return rc;
}

int s3_cred_current(struct s3 *s, char *ak, char *sk, char *tok)
{
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	struct s3_conf *c = &s->conf;
	int64_t now = (int64_t)time(NULL);
	if (c->cred_process[0] && c->expires && now + CRED_MARGIN_S >= c->expires) {
		struct s3_conf fresh = *c;
		rc = s3_cred_process(&fresh);
		if (rc == 0) {
			strcpy(c->access_key, fresh.access_key);
			strcpy(c->secret_key, fresh.secret_key);
			strcpy(c->token, fresh.token);
			c->expires = fresh.expires;
		} else if (now < c->expires) {
			rc = 0; /* not expired yet: these still serve, the next request tries again */
		}
	}
	strcpy(ak, c->access_key);
	strcpy(sk, c->secret_key);
	strcpy(tok, c->token);
	pthread_mutex_unlock(&s->mu);
	return rc;
}
