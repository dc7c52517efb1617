/* Where an S3 remote is and who we are there, resolved the way the AWS tools do it: the url
 * (s3://bucket/prefix?options), the environment (AWS_ENDPOINT_URL[_S3], AWS_REGION,
 * AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE,
 * AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, AWS_S3_ADDRESSING_STYLE) and the profile files
 * (~/.aws/credentials, ~/.aws/config). docs/remote-s3.md has the order of precedence. No I/O
 * beyond reading those two files, and running a profile's credential_process (s3_cred.c). */
#include "remote/s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/common.h"

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
		s[--n] = 0;
	return s;
}

/* State of one pass over an ini file looking for [sect] key (or [sect] sub = / key). */
struct ini_scan {
	const char *sect, *sub, *key;
	int in_sect, in_sub, nested;
};

/* Looks at one line; returns 1 and sets *val when it is the key wanted. */
static int ini_line(struct ini_scan *st, char *line, char **val)
{
	int indented = line[0] == ' ' || line[0] == '\t';
	char *s = trim(line);
	if (!*s || *s == '#' || *s == ';')
		return 0;
	if (*s == '[') {
		char *e = strchr(s, ']');
		if (e)
			*e = 0;
		char *name = trim(s + 1);
		/* "[profile  dev]" and "[profile dev]" name the same profile */
		st->in_sect = e && strcmp(name, st->sect) == 0;
		if (e && !st->in_sect && strncmp(st->sect, "profile ", 8) == 0 &&
		    strncmp(name, "profile", 7) == 0 && (name[7] == ' ' || name[7] == '\t'))
			st->in_sect = strcmp(trim(name + 8), st->sect + 8) == 0;
		st->in_sub = st->nested = 0;
		return 0;
	}
	char *eq = strchr(s, '=');
	if (!st->in_sect || !eq)
		return 0;
	*eq = 0;
	char *k = trim(s), *v = trim(eq + 1);
	/* An indented line belongs to the nested section that a key with no value opened
	 * ("s3 =" and the lines under it); anywhere else indentation means nothing. */
	int nested_line = indented && st->nested;
	if (!nested_line) {
		st->nested = !*v;
		st->in_sub = st->sub && !*v && strcasecmp(k, st->sub) == 0;
	}
	if (nested_line != (st->sub != NULL) || (st->sub && !st->in_sub) || strcasecmp(k, st->key))
		return 0;
	*val = v;
	return 1;
}

int s3_ini_get(const char *path, const char *sect, const char *sub, const char *key, char *out,
	       size_t outsz)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return 0; /* a profile file is optional; a missing one has no keys */
	struct ini_scan st = { sect, sub, key, 0, 0, 0 };
	char line[4096], *val = NULL;
	int lineno = 0, found = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fclose(f);
			return ckpt_fail(CKPT_E_INVAL, "%s, line %d: longer than %zu bytes", path,
					 lineno, sizeof line - 1);
		}
		if (ini_line(&st, line, &val)) {
			found = 1; /* a later line wins, as in Python's configparser */
			if (strlen(val) >= outsz) {
				fclose(f);
				return ckpt_fail(CKPT_E_INVAL, "%s, line %d: the value of %s is longer "
						 "than %zu bytes", path, lineno, key, outsz - 1);
			}
			strcpy(out, val);
		}
	}
	fclose(f);
	return found;
}

/* The profile files and the profile's name. */
struct s3_files {
	char cred[1024], config[1024];
	char sect[160]; /* the profile's section in config: "profile NAME" or "default" */
};

static int env_path(const char *(*env)(const char *), const char *var, const char *home_rel,
		    char *out, size_t outsz)
{
	const char *v = env(var), *home = env("HOME");
	int n = v && *v ? snprintf(out, outsz, "%s", v)
			: snprintf(out, outsz, "%s/%s", home && *home ? home : ".", home_rel);
	if (n < 0 || (size_t)n >= outsz)
		return ckpt_fail(CKPT_E_INVAL, "%s: the path is longer than %zu bytes", var, outsz);
	return 0;
}

/* Reads key from the config file's profile (sub-section sub when not NULL). */
static int conf_get(const struct s3_files *f, const char *sub, const char *key, char *out,
		    size_t outsz)
{
	int rc = s3_ini_get(f->config, f->sect, sub, key, out, outsz);
	if (rc == 0 && strcmp(f->sect, "profile default") == 0)
		rc = s3_ini_get(f->config, "default", sub, key, out, outsz);
	return rc;
}

/* Access key, secret and token from one file section: 1 when both keys are there. */
static int keys_from(const char *path, const char *sect, const struct s3_files *f,
		     struct s3_conf *c)
{
	int a, s, t;
	if (f) {
		a = conf_get(f, NULL, "aws_access_key_id", c->access_key, sizeof c->access_key);
		s = conf_get(f, NULL, "aws_secret_access_key", c->secret_key, sizeof c->secret_key);
		t = conf_get(f, NULL, "aws_session_token", c->token, sizeof c->token);
	} else {
		a = s3_ini_get(path, sect, NULL, "aws_access_key_id", c->access_key,
			       sizeof c->access_key);
		s = s3_ini_get(path, sect, NULL, "aws_secret_access_key", c->secret_key,
			       sizeof c->secret_key);
		t = s3_ini_get(path, sect, NULL, "aws_session_token", c->token, sizeof c->token);
	}
	if (a < 0 || s < 0 || t < 0)
		return a < 0 ? a : s < 0 ? s : t;
	if (a && s)
		return 1;
	c->access_key[0] = c->secret_key[0] = c->token[0] = 0;
	return 0;
}

static int copy_env(const char *v, char *out, size_t outsz, const char *var)
{
	if (strlen(v) >= outsz)
		return ckpt_fail(CKPT_E_INVAL, "%s is longer than %zu bytes", var, outsz - 1);
	strcpy(out, v);
	return 1;
}

/* Credentials: the environment, then the credentials file, then the config file's
 * credential_process, then its static keys (a profile named in the url comes before the
 * environment, as --profile does for the AWS CLI). */
static int resolve_keys(struct s3_conf *c, const struct s3_files *f, int url_profile,
			const char *(*env)(const char *))
{
	const char *ak = env("AWS_ACCESS_KEY_ID"), *sk = env("AWS_SECRET_ACCESS_KEY");
	const char *tok = env("AWS_SESSION_TOKEN");
	int rc;
	if (!url_profile && ak && *ak && sk && *sk) {
		if ((rc = copy_env(ak, c->access_key, sizeof c->access_key, "AWS_ACCESS_KEY_ID")) < 0 ||
		    (rc = copy_env(sk, c->secret_key, sizeof c->secret_key,
				   "AWS_SECRET_ACCESS_KEY")) < 0)
			return rc;
		if (tok && *tok && (rc = copy_env(tok, c->token, sizeof c->token,
						  "AWS_SESSION_TOKEN")) < 0)
			return rc;
		return 0;
	}
	if ((rc = keys_from(f->cred, c->profile, NULL, c)) != 0)
		return rc < 0 ? rc : 0;
	/* as botocore: the process after the credentials file, before the config's static keys */
	if ((rc = conf_get(f, NULL, "credential_process", c->cred_process,
			   sizeof c->cred_process)) != 0)
		return rc < 0 ? rc : s3_cred_process(c);
	if ((rc = keys_from(NULL, NULL, f, c)) != 0)
		return rc < 0 ? rc : 0;
	return ckpt_fail(CKPT_E_PERM, "s3://%s: no credentials: set AWS_ACCESS_KEY_ID and "
			 "AWS_SECRET_ACCESS_KEY, or give profile '%s' aws_access_key_id and "
			 "aws_secret_access_key in %s or %s, or a credential_process in %s", c->bucket,
			 c->profile, f->cred, f->config, f->config);
}

/* The first non-empty of: the url's option, the environment variables, the profile's key. */
static int pick(const char *opt, const char *(*env)(const char *), const char *const *vars,
		const struct s3_files *f, const char *sub, const char *key, char *out, size_t outsz)
{
	if (opt && *opt)
		return copy_env(opt, out, outsz, key);
	for (; vars && *vars; vars++) {
		const char *v = env(*vars);
		if (v && *v)
			return copy_env(v, out, outsz, *vars);
	}
	return key ? conf_get(f, sub, key, out, outsz) : 0;
}

/* The url's options, "name=value" joined by '&'. */
struct url_opts {
	char addressing[16], region[64], endpoint[512], profile[128], page[16], noreplace[16];
};

static int parse_opts(const char *url, char *q, struct url_opts *o)
{
	static const struct { const char *name; size_t off, size; } names[] = {
		{ "addressing", offsetof(struct url_opts, addressing), 16 },
		{ "region", offsetof(struct url_opts, region), 64 },
		{ "endpoint", offsetof(struct url_opts, endpoint), 512 },
		{ "profile", offsetof(struct url_opts, profile), 128 },
		{ "page", offsetof(struct url_opts, page), 16 },
		{ "noreplace", offsetof(struct url_opts, noreplace), 16 },
	};
	for (char *save = NULL, *kv = strtok_r(q, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(kv, '=');
		size_t i;
		if (eq)
			*eq = 0;
		for (i = 0; i < ARRAY_SIZE(names) && strcmp(kv, names[i].name); i++)
			;
		if (!eq || i == ARRAY_SIZE(names) || strlen(eq + 1) >= names[i].size)
			return ckpt_fail(CKPT_E_INVAL, "%s: bad option '%s' (options: addressing=path|"
					 "virtual|auto, region=, endpoint=, profile=, page=N, "
					 "noreplace=probe|atomic|check)", url, kv);
		strcpy((char *)o + names[i].off, eq + 1);
	}
	return 0;
}

/* s3://bucket[/prefix][?options] into c->bucket, c->prefix and *o. */
static int parse_url(const char *url, struct s3_conf *c, struct url_opts *o)
{
	char buf[2048];
	if (strncmp(url, "s3://", 5) != 0 || strlen(url) >= sizeof buf)
		return ckpt_fail(CKPT_E_INVAL, "%.200s: not an s3://bucket/prefix url", url);
	strcpy(buf, url + 5);
	char *q = strchr(buf, '?');
	if (q) {
		*q++ = 0;
		int rc = parse_opts(url, q, o);
		if (rc)
			return rc;
	}
	char *slash = strchr(buf, '/');
	if (slash)
		*slash++ = 0;
	size_t bl = strlen(buf);
	if (bl == 0 || bl >= sizeof c->bucket || strspn(buf, "abcdefghijklmnopqrstuvwxyz"
		"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != bl)
		return ckpt_fail(CKPT_E_INVAL, "%s: bad bucket name '%s' (letters, digits, '.', '-', "
				 "'_')", url, buf);
	strcpy(c->bucket, buf);
	const char *p = slash ? slash : "";
	while (*p == '/')
		p++;
	size_t pl = strlen(p);
	for (size_t i = 0; i < pl; i++)
		if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
			return ckpt_fail(CKPT_E_INVAL, "%s: a control character in the prefix", url);
	if (pl + 2 > sizeof c->prefix)
		return ckpt_fail(CKPT_E_INVAL, "%s: the prefix is longer than %zu bytes", url,
				 sizeof c->prefix - 2);
	strcpy(c->prefix, p);
	if (pl && p[pl - 1] != '/')
		strcat(c->prefix, "/");
	return 0;
}

/* Endpoint and addressing: custom endpoints (radosgw, MinIO) get path-style by default, AWS
 * virtual-hosted (unless the bucket has a dot, which a wildcard TLS certificate cannot cover). */
static int resolve_endpoint(const char *url, struct s3_conf *c, const struct url_opts *o,
			    const struct s3_files *f, const char *(*env)(const char *))
{
	static const char *const ep_vars[] = { "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", NULL };
	static const char *const addr_vars[] = { "AWS_S3_ADDRESSING_STYLE", NULL };
	char style[32] = "";
	int rc = pick(o->endpoint, env, ep_vars, f, "s3", "endpoint_url", c->endpoint,
		      sizeof c->endpoint);
	if (rc == 0)
		rc = conf_get(f, NULL, "endpoint_url", c->endpoint, sizeof c->endpoint);
	if (rc < 0)
		return rc;
	c->custom_endpoint = rc > 0;
	if (!rc && snprintf(c->endpoint, sizeof c->endpoint, "https://s3.%s.amazonaws.com",
			    c->region) >= (int)sizeof c->endpoint)
		return ckpt_fail(CKPT_E_INVAL, "%s: region '%s' is too long", url, c->region);
	size_t n = strlen(c->endpoint);
	while (n && c->endpoint[n - 1] == '/')
		c->endpoint[--n] = 0;
	if ((strncmp(c->endpoint, "http://", 7) && strncmp(c->endpoint, "https://", 8)) ||
	    strpbrk(c->endpoint, "?# \t") || !strstr(c->endpoint, "://")[3])
		return ckpt_fail(CKPT_E_INVAL, "%s: bad endpoint '%s' (http://host[:port] or "
				 "https://host[:port])", url, c->endpoint);
	if ((rc = pick(o->addressing, env, addr_vars, f, "s3", "addressing_style", style,
		       sizeof style)) < 0)
		return rc;
	const char *host = strstr(c->endpoint, "://") + 3;
	int aws = !c->custom_endpoint || (strstr(host, ".amazonaws.com") != NULL);
	if (!*style || !strcmp(style, "auto"))
		c->addressing = aws && !strchr(c->bucket, '.') ? S3_ADDR_VIRTUAL : S3_ADDR_PATH;
	else if (!strcmp(style, "path"))
		c->addressing = S3_ADDR_PATH;
	else if (!strcmp(style, "virtual"))
		c->addressing = S3_ADDR_VIRTUAL;
	else
		return ckpt_fail(CKPT_E_INVAL, "%s: bad addressing style '%s' (path, virtual, auto)",
				 url, style);
	return 0;
}

static int resolve_misc(const char *url, struct s3_conf *c, const struct url_opts *o)
{
	char *end;
	errno = 0;
	unsigned long page = o->page[0] ? strtoul(o->page, &end, 10) : 0;
	if (o->page[0] && (*end || errno || page == 0 || page > 1000))
		return ckpt_fail(CKPT_E_INVAL, "%s: bad page '%s' (1 to 1000 keys)", url, o->page);
	c->page = (unsigned)page;
	if (!o->noreplace[0] || !strcmp(o->noreplace, "probe"))
		c->noreplace = -1;
	else if (!strcmp(o->noreplace, "atomic") || !strcmp(o->noreplace, "check"))
		c->noreplace = o->noreplace[0] == 'a';
	else
		return ckpt_fail(CKPT_E_INVAL, "%s: bad noreplace '%s' (probe, atomic, check)", url,
				 o->noreplace);
	return 0;
}

int s3_conf_resolve_env(const char *url, struct s3_conf *c, const char *(*env)(const char *))
{
	static const char *const region_vars[] = { "AWS_REGION", "AWS_DEFAULT_REGION", NULL };
	struct url_opts o = { 0 };
	struct s3_files f;
	int rc;
	memset(c, 0, sizeof *c);
	if ((rc = parse_url(url, c, &o)) || (rc = resolve_misc(url, c, &o)))
		return rc;
	const char *pv = env("AWS_PROFILE");
	rc = snprintf(c->profile, sizeof c->profile, "%s", o.profile[0] ? o.profile
			 : pv && *pv ? pv : "default");
	if (rc >= (int)sizeof c->profile || strpbrk(c->profile, "[]\n"))
		return ckpt_fail(CKPT_E_INVAL, "%s: bad profile name '%.100s'", url, c->profile);
	snprintf(f.sect, sizeof f.sect, "profile %s", c->profile);
	if ((rc = env_path(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials", f.cred,
			   sizeof f.cred)) ||
	    (rc = env_path(env, "AWS_CONFIG_FILE", ".aws/config", f.config, sizeof f.config)))
		return rc;
	rc = pick(o.region, env, region_vars, &f, NULL, "region", c->region, sizeof c->region);
	if (rc < 0)
		return rc;
	if (rc == 0)
		strcpy(c->region, "us-east-1");
	if (strspn(c->region, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(c->region))
		return ckpt_fail(CKPT_E_INVAL, "%s: bad region '%s'", url, c->region);
	if ((rc = resolve_endpoint(url, c, &o, &f, env)))
		return rc;
	return resolve_keys(c, &f, o.profile[0] != 0, env);
}

static const char *real_env(const char *name)
{
	return getenv(name);
}

int s3_conf_resolve(const char *url, struct s3_conf *c)
{
	return s3_conf_resolve_env(url, c, real_env);
}
