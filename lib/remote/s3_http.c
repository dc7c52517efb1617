/* One S3 request through libcurl, signed by libcurl itself (CURLOPT_AWS_SIGV4), with the retries
 * of the remote contract (remote.h): transient failures again after an exponential backoff with
 * jitter, up to cfg.retries times. Also the bandwidth cap on uploads (one clock per handle, shared
 * by every thread) and the translation of a failed answer into a CKPT_E_* code whose message
 * names bucket/key, the HTTP status and the server's error code. */
#include "remote/s3_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

/* The state of one attempt, seen by libcurl's callbacks. */
struct xfer {
	struct s3 *s;
	struct s3_req *req;
	CURL *c;
	uint64_t pos;       /* upload: bytes of the body handed to libcurl */
	uint64_t skip;      /* download: bytes to drop first (a server that ignored our Range) */
	int ranged, full;   /* full: dst is filled; the rest is not wanted */
	int read_errno, canceled;
	int auth_rc;        /* the credentials could not be had (a credential_process failed) */
	int64_t sent;       /* progress reported for this attempt (taken back if it fails) */
	/* the stall clock: when a byte last moved (or the connection was still being made) */
	double moved;
	curl_off_t dn, un;
	unsigned stall_s;   /* no byte for this long fails the attempt */
	int stalled;
};

static void sleep_s(double s)
{
	if (s <= 0)
		return;
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Waits until n more bytes may leave under the handle's bandwidth cap. The cap is one schedule
 * for the whole handle: each taker books the next n / bandwidth seconds, so the bytes sent by all
 * threads by time t never exceed bandwidth * t plus one chunk a thread, and idle time earns no
 * burst. */
static void bw_take(struct s3 *s, size_t n)
{
	uint64_t bw = s->base.cfg.bandwidth;
	if (!bw)
		return;
	pthread_mutex_lock(&s->mu);
	double now = ckpt_now(), start = s->bw_next > now ? s->bw_next : now;
	s->bw_next = start + (double)n / (double)bw;
	pthread_mutex_unlock(&s->mu);
	sleep_s(start - now);
}

/* Is the request to stop now: its caller canceled it, or the handle is canceled (rmt_cancel,
 * which a cleanup outlives: it is bounded anyway). */
static int stop_now(struct s3 *s, struct s3_req *r)
{
	return (!r->cleanup && rmt_canceled(&s->base)) || (r->canceled && r->canceled(r->arg));
}

/* libcurl calls it often while bytes move and about once a second while none do (a connection
 * being made, an answer awaited): the one place a cancel reaches a request that waits. */
static int on_xfer(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct xfer *x = arg;
	if (stop_now(x->s, x->req))
		x->canceled = 1;
	/* No byte for stall_s once connected: libcurl's low-speed check alone averages over its last
	 * 5 s, so that a request whose body has just gone out would wait that long at least. The
	 * connection itself has CURLOPT_CONNECTTIMEOUT. */
	double now = ckpt_now();
	curl_off_t pre = 0;
	curl_easy_getinfo(x->c, CURLINFO_PRETRANSFER_TIME_T, &pre);
	if (pre <= 0 || dn != x->dn || un != x->un) {
		x->moved = now;
		x->dn = dn, x->un = un;
	} else if (now - x->moved >= x->stall_s) {
		x->stalled = 1;
	}
	return x->canceled || x->stalled;
}

static size_t on_read(char *buf, size_t size, size_t nitems, void *arg)
{
	struct xfer *x = arg;
	struct s3_req *r = x->req;
	size_t n = size * nitems;
	uint64_t left = r->body_len - x->pos;
	if (stop_now(x->s, r)) {
		x->canceled = 1;
		return CURL_READFUNC_ABORT;
	}
	if (n > left)
		n = (size_t)left;
	if (x->s->base.cfg.bandwidth && n > 16384)
		n = 16384; /* small steps keep the cap smooth */
	if (n == 0)
		return 0;
	bw_take(x->s, n);
	if (!r->src) {
		memcpy(buf, r->body + x->pos, n);
	} else if (r->src->buf) {
		memcpy(buf, (const char *)r->src->buf + r->src->off + r->body_off + x->pos, n);
	} else {
		ssize_t got = pread(r->src->fd, buf, n, (off_t)(r->src->off + r->body_off + x->pos));
		if (got <= 0) {
			x->read_errno = got < 0 ? errno : -1;
			return CURL_READFUNC_ABORT;
		}
		n = (size_t)got;
	}
	x->pos += n;
	if (r->sent) {
		r->sent(r->arg, (int64_t)n);
		x->sent += (int64_t)n;
	}
	return n;
}

/* libcurl rewinds the body when it must send it again (a redirect, a 100-continue refused). */
static int on_seek(void *arg, curl_off_t off, int origin)
{
	struct xfer *x = arg;
	if (origin != SEEK_SET || off < 0 || (uint64_t)off > x->req->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	x->pos = (uint64_t)off;
	return CURL_SEEKFUNC_OK;
}

/* Appends to the bounded response buffer (XML answers and error bodies). */
static int resp_add(struct s3_req *r, const char *p, size_t n, size_t max)
{
	if (r->resp_len + n > max)
		n = max - r->resp_len; /* the rest of an over-long answer is not read */
	char *nb = realloc(r->resp, r->resp_len + n + 1);
	if (!nb)
		return -1;
	r->resp = nb;
	memcpy(r->resp + r->resp_len, p, n);
	r->resp_len += n;
	r->resp[r->resp_len] = 0;
	return 0;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *arg)
{
	struct xfer *x = arg;
	struct s3_req *r = x->req;
	size_t n = size * nmemb;
	long st = 0;
	curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &st);
	if (!r->dst || st >= 300)
		return resp_add(r, p, n, r->dst ? 65536 : S3_RESP_MAX) ? 0 : n;
	size_t used = 0;
	if (st == 200 && x->ranged && x->skip) {
		used = n < x->skip ? n : (size_t)x->skip;
		x->skip -= used;
	}
	uint64_t room = r->dst_len - r->got, take = n - used < room ? n - used : room;
	memcpy((char *)r->dst + r->got, p + used, (size_t)take);
	r->got += take;
	if (used + take < n) {
		x->full = 1; /* more than asked for: stop the transfer, we have our bytes */
		return 0;
	}
	return n;
}

static size_t on_header(char *p, size_t size, size_t nitems, void *arg)
{
	struct s3_req *r = ((struct xfer *)arg)->req;
	size_t n = size * nitems;
	if (n > 5 && strncasecmp(p, "etag:", 5) == 0) {
		const char *v = p + 5;
		size_t l = n - 5;
		while (l && (*v == ' ' || *v == '\t'))
			v++, l--;
		while (l && (v[l - 1] == '\r' || v[l - 1] == '\n' || v[l - 1] == ' '))
			l--;
		if (l < sizeof r->etag) {
			memcpy(r->etag, v, l);
			r->etag[l] = 0;
		}
	}
	return n;
}

int s3_encode(const char *in, int keep_slash, char *out, size_t outsz)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
		int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			    (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' ||
			    *p == '~' || (keep_slash && *p == '/');
		if (o + (plain ? 1 : 3) >= outsz)
			return ckpt_fail(CKPT_E_INVAL, "s3: '%.100s...' is too long once encoded", in);
		if (plain) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = 0;
	return 0;
}

int s3_full_key(struct s3 *s, const char *key, char *out, size_t outsz)
{
	if (!key || !*key)
		return ckpt_fail(CKPT_E_INVAL, "s3://%s/%s: empty key", s->conf.bucket,
				 s->conf.prefix);
	if ((size_t)snprintf(out, outsz, "%s%s", s->conf.prefix, key) >= outsz)
		return ckpt_fail(CKPT_E_INVAL, "s3://%s/%s%.100s...: key too long", s->conf.bucket,
				 s->conf.prefix, key);
	return 0;
}

/* The request's url: path-style endpoint/bucket/key or virtual-hosted scheme://bucket.host/key. */
static int make_url(struct s3 *s, const struct s3_req *req, char *url, size_t size)
{
	char ekey[3200] = "";
	const char *ep = s->conf.endpoint, *host = strstr(ep, "://") + 3;
	int rc, n;
	if (req->key && (rc = s3_encode(req->key, 1, ekey, sizeof ekey)))
		return rc;
	const char *q = req->query ? "?" : "", *qs = req->query ? req->query : "";
	if (s->conf.addressing == S3_ADDR_VIRTUAL)
		n = snprintf(url, size, "%.*s%s.%s/%s%s%s", (int)(host - ep), ep, s->conf.bucket, host,
			     ekey, q, qs);
	else
		n = snprintf(url, size, "%s/%s%s%s%s%s", ep, s->conf.bucket, req->key ? "/" : "",
			     ekey, q, qs);
	if (n < 0 || (size_t)n >= size)
		return ckpt_fail(CKPT_E_INVAL, "s3://%s/%s: url too long", s->conf.bucket,
				 req->key ? req->key : "");
	return 0;
}

static CURL *take_handle(struct s3 *s)
{
	CURL *c = NULL;
	pthread_mutex_lock(&s->mu);
	if (s->n_idle)
		c = s->idle[--s->n_idle];
	pthread_mutex_unlock(&s->mu);
	if (c)
		curl_easy_reset(c); /* keeps its open connections */
	return c ? c : curl_easy_init();
}

static void give_handle(struct s3 *s, CURL *c)
{
	pthread_mutex_lock(&s->mu);
	if (ckpt_grow((void **)&s->idle, &s->cap_idle, s->n_idle + 1, sizeof *s->idle) == 0) {
		s->idle[s->n_idle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&s->mu);
	if (c)
		curl_easy_cleanup(c);
}

void s3_http_fini(struct s3 *s)
{
	for (size_t i = 0; i < s->n_idle; i++)
		curl_easy_cleanup(s->idle[i]);
	free(s->idle);
	s->idle = NULL;
	s->n_idle = s->cap_idle = 0;
}

/* The method, body and download options of one request. */
static void set_method(CURL *c, struct xfer *x, const char *url)
{
	struct s3_req *req = x->req;
	const struct rmt_config *cfg = &x->s->base.cfg;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L); /* a key's "/../" is a name, not a step */
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	/* "No progress for timeout_s" fails a request: a dead or hung server is an error. A cleanup
	 * is bounded as a whole, connection included: it must not hold a failed put or a close. */
	long stall = (long)cfg->timeout_s, conn = (long)cfg->connect_timeout_s;
	if (req->cleanup) {
		stall = MIN(stall, (long)RMT_CLEANUP_S);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, stall);
		conn = MIN(conn, stall);
	}
	x->stall_s = (unsigned)stall;
	x->moved = ckpt_now();
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, conn);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, stall);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	/* Larger buffers than the defaults (16 KiB down, 64 KiB up): fewer callbacks a byte. */
	curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 256L << 10);
	curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 1L << 20);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
	if (!strcmp(req->method, "PUT")) {
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(c, CURLOPT_READDATA, x);
		curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(c, CURLOPT_SEEKDATA, x);
	} else if (!strcmp(req->method, "POST")) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "");
	} else if (!strcmp(req->method, "HEAD")) {
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		curl_easy_setopt(c, CURLOPT_FILETIME, 1L);
	} else if (strcmp(req->method, "GET")) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
	}
}

/* The signature and the headers: libcurl 7.88 signs the payload hash it finds in
 * x-amz-content-sha256 and adds none itself (docs/remote-s3.md), so every request says
 * UNSIGNED-PAYLOAD. */
static int set_auth(CURL *c, struct s3 *s, struct s3_req *req, struct curl_slist **hl)
{
	char tok[4200], ak[sizeof s->conf.access_key], sk[sizeof s->conf.secret_key];
	char token[sizeof s->conf.token];
	int rc = s3_cred_current(s, ak, sk, token); /* a credential_process's keys may expire */
	if (rc)
		return rc;
	struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	if (h && token[0]) {
		snprintf(tok, sizeof tok, "x-amz-security-token: %s", token);
		h = curl_slist_append(h, tok) ? h : (curl_slist_free_all(h), NULL);
	}
	for (size_t i = 0; h && i < ARRAY_SIZE(req->hdr) && req->hdr[i]; i++)
		h = curl_slist_append(h, req->hdr[i]) ? h : (curl_slist_free_all(h), NULL);
	if (h && !strcmp(req->method, "POST"))
		h = curl_slist_append(h, "Content-Type: application/xml") ? h
			: (curl_slist_free_all(h), NULL);
	if (!h)
		return ckpt_fail(CKPT_E_NOMEM, "s3 %s: out of memory for headers", req->what);
	*hl = h;
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_AWS_SIGV4, s->sigv4);
	curl_easy_setopt(c, CURLOPT_USERNAME, ak); /* libcurl keeps its own copies */
	curl_easy_setopt(c, CURLOPT_PASSWORD, sk);
	return 0;
}

/* Is an answer worth another try? 5xx but 501 (not implemented) and 507 (full), 429, SlowDown,
 * and S3's 400 RequestTimeout (an idle connection the server dropped). */
static int transient_status(const struct s3_req *req)
{
	long st = req->status;
	if (st == 429 || (st >= 500 && st != 501 && st != 507))
		return 1;
	return !strcmp(req->code, "SlowDown") || !strcmp(req->code, "RequestTimeout");
}

static int transient_curl(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST: case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR: case CURLE_RECV_ERROR: case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE: case CURLE_HTTP2: case CURLE_HTTP2_STREAM:
	case CURLE_SSL_CONNECT_ERROR:
		return 1;
	default:
		return 0;
	}
}

/* Clears the outputs before an attempt. */
static void req_reset(struct s3_req *req)
{
	req->status = 0;
	req->resp_len = 0;
	if (req->resp)
		req->resp[0] = 0;
	req->got = 0;
	req->length = -1;
	req->mtime = 0;
	req->etag[0] = req->code[0] = 0;
}

/* One attempt. Returns the curl code; the answer is in req. */
static CURLcode attempt(struct s3 *s, struct s3_req *req, CURL *c, const char *url,
			struct xfer *x, char *err)
{
	struct curl_slist *h = NULL;
	req_reset(req);
	*x = (struct xfer){ .s = s, .req = req, .c = c };
	for (size_t i = 0; i < ARRAY_SIZE(req->hdr) && req->hdr[i]; i++) {
		unsigned long long a, b;
		if (sscanf(req->hdr[i], "Range: bytes=%llu-%llu", &a, &b) == 2)
			x->ranged = 1, x->skip = a;
	}
	set_method(c, x, url);
	if ((x->auth_rc = set_auth(c, s, req, &h)) != 0)
		return CURLE_OUT_OF_MEMORY; /* final: s3_do returns auth_rc */
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
	err[0] = 0;
	CURLcode cc = curl_easy_perform(c);
	curl_slist_free_all(h);
	if (cc == CURLE_WRITE_ERROR && x->full)
		cc = CURLE_OK;
	if (cc == CURLE_ABORTED_BY_CALLBACK && x->stalled && !x->canceled) {
		cc = CURLE_OPERATION_TIMEDOUT; /* a timeout as libcurl's own: retried */
		snprintf(err, CURL_ERROR_SIZE, "no byte moved for %u s", x->stall_s);
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &req->status);
	curl_off_t len = -1, ft = -1;
	if (curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len) == CURLE_OK)
		req->length = len;
	if (curl_easy_getinfo(c, CURLINFO_FILETIME_T, &ft) == CURLE_OK && ft > 0)
		req->mtime = ft;
	if (cc == CURLE_OK && req->status >= 300 && req->resp_len)
		s3_xml_text((struct s3_span){ req->resp, req->resp_len }, "Code", req->code,
			    sizeof req->code);
	if (cc != CURLE_OK && x->sent && req->sent)
		req->sent(req->arg, -x->sent); /* the bytes go again */
	return cc;
}

/* Backoff before retry number k (0-based): half of min(0.25 s * 2^k, 8 s) plus a random part of
 * the other half, so that threads that failed together do not come back together. Slept in
 * slices, so that a cancel ends it: returns non-zero then. */
static int backoff(struct s3 *s, struct s3_req *req, unsigned k)
{
	static __thread uint64_t rnd;
	if (!rnd)
		rnd = (uint64_t)ckpt_wall_ns() ^ ((uint64_t)pthread_self() << 17) ^ 0x9E3779B97F4A7C15ull;
	rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
	double d = 0.25 * (double)(1u << (k < 5 ? k : 5));
	if (d > 8)
		d = 8;
	double end = ckpt_now() + d / 2 + d / 2 * (double)(rnd >> 11) / 9007199254740992.0;
	for (double now; !stop_now(s, req) && (now = ckpt_now()) < end;)
		sleep_s(MIN(end - now, 0.05));
	return stop_now(s, req);
}

int s3_do(struct s3 *s, struct s3_req *req)
{
	char url[12288], err[CURL_ERROR_SIZE];
	int rc = make_url(s, req, url, sizeof url);
	if (rc)
		return rc;
	CURL *c = take_handle(s);
	if (!c)
		return ckpt_fail(CKPT_E_NOMEM, "s3 %s: curl_easy_init failed", req->what);
	struct xfer x = { .canceled = stop_now(s, req) }; /* canceled: nothing is sent */
	CURLcode cc = CURLE_OK;
	unsigned tries = 0, retries = req->cleanup ? 0 : s->base.cfg.retries;
	while (!x.canceled) {
		cc = attempt(s, req, c, url, &x, err);
		int again = cc == CURLE_OK ? transient_status(req) : transient_curl(cc);
		if (!again || tries >= retries || x.canceled)
			break;
		x.canceled = backoff(s, req, tries++);
	}
	give_handle(s, c);
	req->attempts = tries + 1;
	const char *obj = req->key ? req->key : s->conf.prefix;
	if (x.auth_rc)
		return x.auth_rc; /* its message names the profile and the program */
	if (x.read_errno)
		return ckpt_fail(x.read_errno > 0 ? ckpt_errno_code(x.read_errno) : CKPT_E_IO,
				 "s3 %s %s/%s: reading the source at byte %llu of the part: %s",
				 req->what, s->conf.bucket, obj, (unsigned long long)x.pos,
				 x.read_errno > 0 ? strerror(x.read_errno) : "it ends early");
	if (x.canceled || cc == CURLE_ABORTED_BY_CALLBACK)
		return ckpt_fail(CKPT_E_CANCELED, "s3 %s %s/%s: canceled", req->what, s->conf.bucket,
				 obj);
	if (cc == CURLE_OUT_OF_MEMORY)
		return ckpt_fail(CKPT_E_NOMEM, "s3 %s %s/%s: out of memory", req->what,
				 s->conf.bucket, obj);
	if (cc != CURLE_OK)
		return ckpt_fail(CKPT_E_IO, "s3 %s %s/%s: endpoint %s: %s (%s) after %u attempt%s",
				 req->what, s->conf.bucket, obj, s->conf.endpoint,
				 curl_easy_strerror(cc), err[0] ? err : "no detail", tries + 1,
				 tries ? "s" : "");
	return 0;
}

int s3_status_error(struct s3 *s, const struct s3_req *req)
{
	char msg[256] = "";
	long st = req->status;
	const char *code = req->code;
	int e = CKPT_E_IO;
	if (req->resp_len)
		s3_xml_text((struct s3_span){ req->resp, req->resp_len }, "Message", msg, sizeof msg);
	if (!strcmp(code, "QuotaExceeded") || !strcmp(code, "EntityTooLarge") ||
	    !strcmp(code, "InsufficientCapacity") || st == 507 || st == 413)
		e = CKPT_E_NOSPC;
	else if (st == 401 || st == 403)
		e = CKPT_E_PERM;
	else if (!strcmp(code, "NoSuchBucket"))
		return ckpt_fail(CKPT_E_NOTFOUND, "s3 %s %s/%s: bucket '%s' does not exist at %s "
				 "(HTTP %ld NoSuchBucket)", req->what, s->conf.bucket,
				 req->key ? req->key : s->conf.prefix, s->conf.bucket, s->conf.endpoint, st);
	else if (st == 404)
		e = CKPT_E_NOTFOUND;
	else if (st == 412)
		e = CKPT_E_EXISTS;
	else if (st == 416)
		e = CKPT_E_CORRUPT;
	return ckpt_fail(e, "s3 %s %s/%s: HTTP %ld%s%s%s%s%s", req->what, s->conf.bucket,
			 req->key ? req->key : s->conf.prefix, st, code[0] ? " " : "", code,
			 msg[0] ? " (" : "", msg, msg[0] ? ")" : "");
}

int s3_check(struct s3 *s, const struct s3_req *req, const long *ok)
{
	if (!ok)
		return req->status >= 200 && req->status < 300 ? 0 : s3_status_error(s, req);
	for (; *ok; ok++)
		if (req->status == *ok)
			return 0;
	return s3_status_error(s, req);
}

int s3_call(struct s3 *s, struct s3_req *req, const long *ok)
{
	int rc = s3_do(s, req);
	return rc ? rc : s3_check(s, req, ok);
}

void s3_req_free(struct s3_req *req)
{
	free(req->resp);
	req->resp = NULL;
	req->resp_len = 0;
}
