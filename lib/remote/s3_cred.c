/* credential_process of a profile (~/.aws/config), as the AWS CLI runs it: the command prints a
 * JSON object {"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken" (optional),
 * "Expiration" (optional, ISO 8601)} on its standard output; its standard error is left to ours,
 * as the CLI shows it. Credentials that expire are fetched again by s3_cred_current() before they
 * do (docs/remote-s3.md). */
#include "remote/s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

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

/* Runs cmd and returns its standard output (malloc'd, NUL-terminated) in *out. */
static int run_cmd(const char *cmd, const char *profile, char **out)
{
	FILE *f = popen(cmd, "re");
	if (!f)
		return ckpt_fail(CKPT_E_PERM, "credential_process of profile '%s' ('%s'): cannot "
				 "run it: %s", profile, cmd, strerror(errno));
	char *buf = malloc(CRED_OUT_MAX + 1);
	size_t n = 0, got;
	char sink[4096];
	while (buf && n < CRED_OUT_MAX && (got = fread(buf + n, 1, CRED_OUT_MAX - n, f)) > 0)
		n += got;
	while (fread(sink, 1, sizeof sink, f) > 0)
		; /* the rest of an over-long output: read, so that the process may end */
	int st = pclose(f);
	if (!buf)
		return ckpt_fail(CKPT_E_NOMEM, "credential_process of profile '%s': out of memory",
				 profile);
	buf[n] = 0;
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		free(buf);
		return ckpt_fail(CKPT_E_PERM, "credential_process of profile '%s' ('%s') failed: %s %d",
				 profile, cmd, st != -1 && WIFEXITED(st) ? "exit status" : "signal",
				 st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	}
	*out = buf;
	return 0;
}

/* The credentials in the process's output js into c (all or nothing). */
static int parse_creds(const char *js, const char *cmd, struct s3_conf *c)
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
		return ckpt_fail(CKPT_E_PERM, "credential_process of profile '%s' ('%s') printed %s",
				 c->profile, cmd, bad);
	strcpy(c->access_key, ak);
	strcpy(c->secret_key, sk);
	strcpy(c->token, t > 0 ? tok : "");
	c->expires = when;
	return 0;
}

int s3_cred_process(struct s3_conf *c)
{
	char *js;
	int rc = run_cmd(c->cred_process, c->profile, &js);
	if (rc)
		return rc;
	rc = parse_creds(js, c->cred_process, c);
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
