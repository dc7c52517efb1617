/* The S3 backend of lib/remote (rmt_s3_ops, remote.h): s3://bucket/prefix on any S3-compatible
 * server (AWS, Ceph radosgw, MinIO), through libcurl with its own SigV4 signing. The contract
 * (all-or-nothing puts, NOREPLACE, ranged gets, retries) is kept as docs/remote-s3.md describes;
 * s3_conf.c says where the remote is, s3_http.c sends, s3_multipart.c uploads large objects. */
#include "remote/s3_int.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void fill_defaults(struct rmt_config *c)
{
	rmt_config_defaults(c);
	if (c->part_size < S3_MIN_PART)
		c->part_size = S3_MIN_PART; /* S3 refuses smaller parts (EntityTooSmall) */
	if (c->part_size > S3_MAX_SINGLE)
		c->part_size = S3_MAX_SINGLE; /* and larger ones, or single PUTs (EntityTooLarge) */
}

static void s3_close(struct rmt *r)
{
	struct s3 *s = (struct s3 *)r;
	if (!s)
		return;
	s3_http_fini(s);
	pthread_mutex_destroy(&s->mu);
	free(s->base.url);
	free(s);
}

/* A GET of the bucket with the query head + the encoded prefix + tail; the answer in *req (to be
 * freed with s3_req_free). */
static int bucket_get(struct s3 *s, const char *head, const char *tail, const char *what,
		      struct s3_req *req)
{
	char ep[3200], q[3300];
	*req = (struct s3_req){ .method = "GET", .query = q, .what = what };
	int rc = s3_encode(s->conf.prefix, 0, ep, sizeof ep);
	if (rc)
		return rc;
	snprintf(q, sizeof q, "%s%s%s", head, ep, tail);
	rc = s3_call(s, req, NULL);
	req->query = NULL; /* q ends here */
	return rc;
}

/* Asks for one key under the prefix: the bucket exists and the credentials are good. */
static int check_bucket(struct s3 *s)
{
	struct s3_req req;
	int rc = bucket_get(s, "list-type=2&max-keys=1&prefix=", "", "open", &req);
	s3_req_free(&req);
	return rc;
}

int s3_open_unchecked(const char *url, const struct rmt_config *cfg, struct rmt **out)
{
	*out = NULL;
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return ckpt_fail(CKPT_E_IO, "%s: curl_global_init: %s", url,
				 curl_easy_strerror(curl_init_rc));
	struct s3 *s = calloc(1, sizeof *s);
	if (!s || !(s->base.url = strdup(url))) {
		free(s);
		return ckpt_fail(CKPT_E_NOMEM, "%s: out of memory", url);
	}
	pthread_mutex_init(&s->mu, NULL);
	s->base.ops = &rmt_s3_ops;
	if (cfg)
		s->base.cfg = *cfg;
	fill_defaults(&s->base.cfg);
	int rc = s3_conf_resolve(url, &s->conf);
	if (rc) {
		s3_close(&s->base);
		return rc;
	}
	snprintf(s->sigv4, sizeof s->sigv4, "aws:amz:%s:s3", s->conf.region);
	*out = &s->base;
	return 0;
}

static int s3_open(const char *url, const struct rmt_config *cfg, struct rmt **out)
{
	int rc = s3_open_unchecked(url, cfg, out);
	if (rc == 0 && (rc = check_bucket((struct s3 *)*out)) != 0) {
		s3_close(*out);
		*out = NULL;
	}
	return rc;
}

/* Does the server refuse a second PUT with If-None-Match: * (412)? A server that ignores the
 * header would overwrite, so NOREPLACE must check first there. Asked once a handle, with a probe
 * object under the prefix that is deleted again; a failed probe means "no". */
static int probe_noreplace(struct s3 *s)
{
	char key[1200];
	snprintf(key, sizeof key, "%s.ckpt-noreplace-probe-%d-%lld", s->conf.prefix, (int)getpid(),
		 (long long)ckpt_wall_ns());
	int atomic = 0;
	for (int i = 0; i < 2; i++) {
		struct s3_req req = { .method = "PUT", .key = key, .body = "1", .body_len = 1,
				      .what = "put (probe)", .hdr = { "If-None-Match: *" } };
		int rc = s3_do(s, &req);
		long st = req.status;
		s3_req_free(&req);
		if (rc || (i == 0 && st != 200) || (i == 1 && st != 412 && st != 200))
			break;
		atomic = i == 1 && st == 412;
	}
	struct s3_req del = { .method = "DELETE", .key = key, .what = "delete (probe)",
			      .cleanup = 1 };
	s3_do(s, &del);
	s3_req_free(&del);
	return atomic;
}

static int noreplace_atomic(struct s3 *s)
{
	if (s->conf.noreplace >= 0)
		return s->conf.noreplace;
	pthread_mutex_lock(&s->mu);
	int done = s->probed;
	pthread_mutex_unlock(&s->mu);
	if (!done) {
		int a = probe_noreplace(s); /* two threads may both probe: same answer */
		pthread_mutex_lock(&s->mu);
		s->probed = 1 + a;
		pthread_mutex_unlock(&s->mu);
	}
	pthread_mutex_lock(&s->mu);
	int a = s->probed == 2;
	pthread_mutex_unlock(&s->mu);
	return a;
}

static unsigned s3_caps(struct rmt *r)
{
	return RMT_CAP_RANGE | (noreplace_atomic((struct s3 *)r) ? RMT_CAP_ATOMIC_NOREPLACE : 0);
}

static int s3_get(struct rmt *r, const char *key, uint64_t off, uint64_t len, void *buf);

static int s3_stat(struct rmt *r, const char *key, uint64_t *size, int64_t *mtime)
{
	struct s3 *s = (struct s3 *)r;
	char fk[1200];
	int rc = s3_full_key(s, key, fk, sizeof fk);
	if (rc)
		return rc;
	struct s3_req req = { .method = "HEAD", .key = fk, .what = "stat" };
	rc = s3_do(s, &req);
	if (rc == 0 && req.status == 404)
		rc = ckpt_fail(CKPT_E_NOTFOUND, "s3 stat %s/%s: HTTP 404 (no such key, or no bucket "
			       "'%s')", s->conf.bucket, fk, s->conf.bucket);
	else if (rc == 0 && req.status != 200)
		rc = s3_status_error(s, &req);
	else if (rc == 0 && req.length < 0)
		rc = ckpt_fail(CKPT_E_CORRUPT, "s3 stat %s/%s: the answer has no Content-Length",
			       s->conf.bucket, fk);
	if (rc == 0) {
		*size = (uint64_t)req.length;
		if (mtime)
			*mtime = req.mtime;
	}
	s3_req_free(&req);
	return rc;
}

/* Is the object at fk the bytes of src? For a NOREPLACE put that was sent twice: the first may
 * have landed with its answer lost, and the 412 of the second is then our own object. Only for
 * objects up to 64 MiB (manifests and small packs); larger ones stay -CKPT_E_EXISTS. */
static int same_object(struct s3 *s, const char *key, const struct rmt_src *src)
{
	uint64_t size;
	if (src->len > (64u << 20) || s3_stat(&s->base, key, &size, NULL) || size != src->len)
		return 0;
	char *a = malloc(src->len ? src->len : 1), *b = src->buf ? NULL : malloc(src->len ? src->len : 1);
	int same = a && (src->buf || b) && s3_get(&s->base, key, 0, src->len, a) == 0;
	if (same && !src->buf)
		same = pread(src->fd, b, src->len, (off_t)src->off) == (ssize_t)src->len;
	if (same)
		same = !memcmp(a, src->buf ? (const char *)src->buf + src->off : b, src->len);
	free(a);
	free(b);
	return same;
}

/* A single PUT (objects up to part_size, or NOREPLACE ones up to 5 GiB on a server whose
 * If-None-Match is atomic: one request is the only atomic check there is). */
static int put_single(struct s3 *s, const char *fk, const struct rmt_src *src, int noreplace,
		      rmt_progress_cb progress, void *arg)
{
	struct s3_progress prog = { .cb = progress, .arg = arg, .total = src->len };
	pthread_mutex_init(&prog.mu, NULL);
	struct s3_req req = { .method = "PUT", .key = fk, .what = "put", .src = src,
			      .body_len = src->len, .sent = s3_progress_sent,
			      .canceled = s3_progress_canceled, .arg = &prog };
	if (noreplace)
		req.hdr[0] = "If-None-Match: *";
	int rc = s3_call(s, &req, NULL);
	if (rc == -CKPT_E_EXISTS && req.attempts > 1 && same_object(s, fk + strlen(s->conf.prefix), src))
		rc = 0;
	else if (rc == -CKPT_E_EXISTS)
		rc = ckpt_fail(CKPT_E_EXISTS, "s3 put %s/%s: the key exists (HTTP 412 "
			       "PreconditionFailed)", s->conf.bucket, fk);
	s3_req_free(&req);
	pthread_mutex_destroy(&prog.mu);
	return rc;
}

static int s3_put(struct rmt *r, const char *key, const struct rmt_src *src, unsigned flags,
		  rmt_progress_cb progress, void *arg)
{
	struct s3 *s = (struct s3 *)r;
	char fk[1200];
	int rc = s3_full_key(s, key, fk, sizeof fk);
	if (rc)
		return rc;
	int noreplace = (flags & RMT_PUT_NOREPLACE) != 0;
	int atomic = noreplace && noreplace_atomic(s);
	if (src->len <= r->cfg.part_size || (atomic && src->len <= S3_MAX_SINGLE)) {
		uint64_t size;
		if (noreplace && !atomic && (rc = s3_stat(r, key, &size, NULL)) != -CKPT_E_NOTFOUND)
			return rc ? rc : ckpt_fail(CKPT_E_EXISTS, "s3 put %s/%s: the key exists "
						   "(%llu bytes)", s->conf.bucket, fk,
						   (unsigned long long)size);
		return put_single(s, fk, src, noreplace, progress, arg);
	}
	return s3_put_multipart(s, fk, src, noreplace, progress, arg);
}

static int s3_get(struct rmt *r, const char *key, uint64_t off, uint64_t len, void *buf)
{
	struct s3 *s = (struct s3 *)r;
	char fk[1200], range[80];
	int rc = s3_full_key(s, key, fk, sizeof fk);
	if (rc)
		return rc;
	if (len == 0) { /* no Range for nothing: the object must still be long enough */
		uint64_t size;
		if ((rc = s3_stat(r, key, &size, NULL)) == 0 && size < off)
			rc = ckpt_fail(CKPT_E_CORRUPT, "s3 get %s/%s: short object: %llu bytes, "
				       "offset %llu asked", s->conf.bucket, fk,
				       (unsigned long long)size, (unsigned long long)off);
		return rc;
	}
	snprintf(range, sizeof range, "Range: bytes=%llu-%llu", (unsigned long long)off,
		 (unsigned long long)(off + len - 1));
	struct s3_req req = { .method = "GET", .key = fk, .what = "get", .hdr = { range },
			      .dst = buf, .dst_len = len };
	static const long ok[] = { 200, 206, 0 };
	rc = s3_call(s, &req, ok);
	if (rc == -CKPT_E_CORRUPT || (rc == 0 && req.got < len))
		rc = ckpt_fail(CKPT_E_CORRUPT, "s3 get %s/%s: short object: %llu of %llu bytes at "
			       "offset %llu (HTTP %ld%s%s)", s->conf.bucket, fk,
			       (unsigned long long)req.got, (unsigned long long)len,
			       (unsigned long long)off, req.status, req.code[0] ? " " : "", req.code);
	s3_req_free(&req);
	return rc;
}

/* Calls cb for each <Contents> of one page; sets *token to the next page's token, "" at the end. */
static int list_page(struct s3 *s, const struct s3_req *req, const char *fp, rmt_list_cb cb,
		     void *arg, char *token, size_t tsz)
{
	struct s3_span all = { req->resp, req->resp_len }, in = all, c;
	size_t pl = strlen(s->conf.prefix);
	char key[1200], trunc[8], when[40];
	while (s3_xml_next(&in, "Contents", &c)) {
		int64_t size = s3_xml_u64(c, "Size");
		if (s3_xml_text(c, "Key", key, sizeof key) <= 0 || size < 0)
			return ckpt_fail(CKPT_E_CORRUPT, "s3 list %s/%s: an entry without a usable "
					 "Key or Size", s->conf.bucket, fp);
		if (strncmp(key, s->conf.prefix, pl) || !key[pl])
			continue; /* not ours (a server that ignores prefix=) */
		if (s3_xml_text(c, "LastModified", when, sizeof when) <= 0)
			when[0] = 0;
		struct rmt_obj o = { key + pl, (uint64_t)size, s3_xml_time(when) };
		int r = cb(arg, &o);
		if (r)
			return r;
	}
	token[0] = 0;
	if (s3_xml_text(all, "IsTruncated", trunc, sizeof trunc) > 0 && !strcmp(trunc, "true") &&
	    s3_xml_text(all, "NextContinuationToken", token, tsz) <= 0)
		return ckpt_fail(CKPT_E_CORRUPT, "s3 list %s/%s: a truncated page without a usable "
				 "NextContinuationToken", s->conf.bucket, fp);
	return 0;
}

static int s3_list(struct rmt *r, const char *prefix, rmt_list_cb cb, void *arg)
{
	struct s3 *s = (struct s3 *)r;
	char fp[1200], ep[3600], tok[1024] = "", etok[3100], q[7000], page[32] = "";
	if ((size_t)snprintf(fp, sizeof fp, "%s%s", s->conf.prefix, prefix ? prefix : "") >= sizeof fp)
		return ckpt_fail(CKPT_E_INVAL, "s3 list %s/%s: prefix too long", s->conf.bucket,
				 s->conf.prefix);
	int rc = s3_encode(fp, 0, ep, sizeof ep);
	if (s->conf.page)
		snprintf(page, sizeof page, "&max-keys=%u", s->conf.page);
	for (unsigned pages = 0; rc == 0; pages++) {
		char prev[1024];
		/* libcurl 7.88 signs the query as written: the names must be in sorted order. */
		if (tok[0] && (rc = s3_encode(tok, 0, etok, sizeof etok)))
			break;
		snprintf(q, sizeof q, "%s%s%slist-type=2%s&prefix=%s", tok[0] ? "continuation-token="
			 : "", tok[0] ? etok : "", tok[0] ? "&" : "", page, ep);
		struct s3_req req = { .method = "GET", .query = q, .what = "list" };
		rc = s3_call(s, &req, NULL);
		snprintf(prev, sizeof prev, "%s", tok);
		if (rc == 0)
			rc = list_page(s, &req, fp, cb, arg, tok, sizeof tok);
		s3_req_free(&req);
		if (rc || !tok[0])
			break;
		if (!strcmp(prev, tok) || pages > 10000000)
			rc = ckpt_fail(CKPT_E_CORRUPT, "s3 list %s/%s: the server repeats its "
				       "continuation token", s->conf.bucket, fp);
	}
	return rc;
}

static int del_key(struct rmt *r, const char *key, int cleanup)
{
	struct s3 *s = (struct s3 *)r;
	char fk[1200];
	int rc = s3_full_key(s, key, fk, sizeof fk);
	if (rc)
		return rc;
	struct s3_req req = { .method = "DELETE", .key = fk, .what = cleanup ? "delete (cleanup)"
			      : "delete", .cleanup = cleanup };
	static const long ok[] = { 200, 204, 0 };
	rc = s3_do(s, &req);
	if (rc == 0 && !(req.status == 404 && strcmp(req.code, "NoSuchBucket")))
		rc = s3_check(s, &req, ok);
	s3_req_free(&req);
	return rc;
}

static int s3_del(struct rmt *r, const char *key)
{
	return del_key(r, key, 0);
}

static int s3_del_cleanup(struct rmt *r, const char *key)
{
	return del_key(r, key, 1);
}

/* The sweep's state across the pages of ListMultipartUploads. */
struct sweep {
	const char *fp;          /* the full prefix swept */
	int64_t before;          /* uploads initiated before this (unix s) are aborted */
	uint64_t removed;
	int rc;                  /* the first failed abort */
	char key[1200], id[1100]; /* the markers of the next page, "" at the end */
};

/* Aborts upload id of full key fk (not a cleanup: the retries of any request). */
static int abort_old(struct s3 *s, const char *fk, const char *id)
{
	char eid[3400], q[3500];
	int rc = s3_encode(id, 0, eid, sizeof eid);
	if (rc)
		return rc;
	snprintf(q, sizeof q, "uploadId=%s", eid);
	struct s3_req req = { .method = "DELETE", .key = fk, .query = q, .what = "sweep (abort)" };
	static const long ok[] = { 200, 204, 404, 0 };
	rc = s3_call(s, &req, ok);
	s3_req_free(&req);
	return rc;
}

/* One page: the old uploads under the prefix aborted, the next page's markers in sw. */
static int sweep_page(struct s3 *s, const struct s3_req *req, struct sweep *sw)
{
	struct s3_span all = { req->resp, req->resp_len }, in = all, u;
	char key[1200], id[1100], when[40], trunc[8];
	size_t fl = strlen(sw->fp);
	while (s3_xml_next(&in, "Upload", &u)) {
		if (s3_xml_text(u, "Key", key, sizeof key) <= 0 ||
		    s3_xml_text(u, "UploadId", id, sizeof id) <= 0)
			return ckpt_fail(CKPT_E_CORRUPT, "s3 sweep %s/%s: an upload without a usable "
					 "Key or UploadId", s->conf.bucket, sw->fp);
		int64_t t = s3_xml_text(u, "Initiated", when, sizeof when) > 0 ? s3_xml_time(when) : 0;
		if (strncmp(key, sw->fp, fl) || !t || t >= sw->before)
			continue; /* not ours (a server that ignores prefix=), of unknown age, or young */
		int rc = abort_old(s, key, id);
		if (rc == 0)
			sw->removed++;
		else if (!sw->rc)
			sw->rc = rc;
	}
	sw->key[0] = sw->id[0] = 0;
	if (s3_xml_text(all, "IsTruncated", trunc, sizeof trunc) <= 0 || strcmp(trunc, "true"))
		return 0;
	if (s3_xml_text(all, "NextKeyMarker", sw->key, sizeof sw->key) <= 0 ||
	    s3_xml_text(all, "NextUploadIdMarker", sw->id, sizeof sw->id) < 0)
		return ckpt_fail(CKPT_E_CORRUPT, "s3 sweep %s/%s: a truncated page of uploads without "
				 "a usable NextKeyMarker", s->conf.bucket, sw->fp);
	return 0;
}

/* The incomplete multipart uploads that killed puts left (a failed put aborts its own, a killed
 * one cannot): ListMultipartUploads under the prefix, AbortMultipartUpload of those initiated
 * before now - older_than_s. Their parts' bytes are not listed: *bytes is left as it is. */
static int s3_sweep(struct rmt *r, const char *prefix, int64_t older_than_s, uint64_t *removed,
		    uint64_t *bytes)
{
	struct s3 *s = (struct s3 *)r;
	char fp[1200], ep[3600], ek[3600], ei[3400], q[11000], page[40] = "";
	if ((size_t)snprintf(fp, sizeof fp, "%s%s", s->conf.prefix, prefix ? prefix : "") >= sizeof fp)
		return ckpt_fail(CKPT_E_INVAL, "s3 sweep %s/%s: prefix too long", s->conf.bucket,
				 s->conf.prefix);
	struct sweep sw = { .fp = fp, .before = (int64_t)time(NULL) - older_than_s };
	int rc = s3_encode(fp, 0, ep, sizeof ep);
	if (s->conf.page)
		snprintf(page, sizeof page, "max-uploads=%u&", s->conf.page);
	for (unsigned pages = 0; rc == 0; pages++) {
		char pk[sizeof sw.key], pi[sizeof sw.id];
		snprintf(pk, sizeof pk, "%s", sw.key);
		snprintf(pi, sizeof pi, "%s", sw.id);
		if ((rc = s3_encode(sw.key, 0, ek, sizeof ek)) || (rc = s3_encode(sw.id, 0, ei, sizeof ei)))
			break;
		/* libcurl 7.88 signs the query as written: the names in sorted order */
		snprintf(q, sizeof q, "%s%s%s%sprefix=%s%s%s&uploads=", sw.key[0] ? "key-marker=" : "", ek,
			 sw.key[0] ? "&" : "", page, ep, sw.key[0] ? "&upload-id-marker=" : "",
			 sw.key[0] ? ei : "");
		struct s3_req req = { .method = "GET", .query = q, .what = "sweep (list uploads)" };
		rc = s3_call(s, &req, NULL);
		if (rc == 0)
			rc = sweep_page(s, &req, &sw);
		s3_req_free(&req);
		if (rc || !sw.key[0])
			break;
		if ((!strcmp(pk, sw.key) && !strcmp(pi, sw.id)) || pages > 10000000)
			rc = ckpt_fail(CKPT_E_CORRUPT, "s3 sweep %s/%s: the server repeats its markers",
				       s->conf.bucket, fp);
	}
	*removed += sw.removed;
	(void)bytes;
	return rc ? rc : sw.rc;
}

const struct rmt_ops rmt_s3_ops = {
	.scheme = "s3",
	.open = s3_open,
	.close = s3_close,
	.caps = s3_caps,
	.put = s3_put,
	.get = s3_get,
	.stat = s3_stat,
	.list = s3_list,
	.del = s3_del,
	.del_cleanup = s3_del_cleanup,
	.sweep = s3_sweep,
};

int s3_make_bucket(struct rmt *r)
{
	struct s3 *s = (struct s3 *)r;
	struct s3_req req = { .method = "PUT", .what = "create bucket" };
	int rc = s3_do(s, &req);
	if (rc == 0 && req.status != 200 && strcmp(req.code, "BucketAlreadyOwnedByYou"))
		rc = s3_status_error(s, &req);
	s3_req_free(&req);
	return rc;
}

int s3_count_uploads(struct rmt *r, unsigned *n)
{
	struct s3_req req;
	int rc = bucket_get((struct s3 *)r, "prefix=", "&uploads=", "list uploads", &req);
	struct s3_span in = { req.resp, req.resp_len }, u;
	for (*n = 0; rc == 0 && s3_xml_next(&in, "Upload", &u);)
		++*n;
	s3_req_free(&req);
	return rc;
}
