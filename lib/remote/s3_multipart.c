/* Multipart uploads: initiate, the parts (cfg.parallel threads taking the next part number),
 * complete, or abort on any failure, so that a key is only ever a whole object (remote.h) and no
 * part is left behind by a failure the server heard of. Also the progress of a put, which the
 * threads of one call add to. */
#include "remote/s3_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

void s3_progress_sent(void *arg, int64_t n)
{
	struct s3_progress *p = arg;
	pthread_mutex_lock(&p->mu);
	p->done += (uint64_t)n; /* n < 0 takes a failed attempt's bytes back */
	/* Reported bytes never go back: a retried part is not progress lost twice. */
	if (p->cb && !p->canceled && p->done > p->reported && (int64_t)p->done > 0) {
		p->reported = p->done;
		p->polled = ckpt_now();
		if (p->cb(p->arg, p->done, p->total))
			p->canceled = 1;
	}
	pthread_mutex_unlock(&p->mu);
}

int s3_progress_canceled(void *arg)
{
	struct s3_progress *p = arg;
	pthread_mutex_lock(&p->mu);
	/* No byte moves while an answer is awaited: ask the caller anyway, not too often (the
	 * callback may be a Python function). */
	if (p->cb && !p->canceled) {
		double now = ckpt_now();
		if (now - p->polled >= 0.2) {
			p->polled = now;
			if (p->cb(p->arg, p->reported, p->total))
				p->canceled = 1;
		}
	}
	int c = p->canceled;
	pthread_mutex_unlock(&p->mu);
	return c;
}

/* Stops the put's other requests (a part failed for good: the rest is not wanted). */
static void progress_stop(struct s3_progress *p)
{
	pthread_mutex_lock(&p->mu);
	p->canceled = 1;
	pthread_mutex_unlock(&p->mu);
}

/* One multipart upload in flight. */
struct mp {
	struct s3 *s;
	const char *fkey;
	const struct rmt_src *src;
	struct s3_progress *prog;
	char eid[1600];       /* the upload id, percent-encoded for the query */
	uint64_t part_size;
	unsigned nparts;
	char (*etags)[128];
	pthread_mutex_t mu;   /* guards next, err, msg */
	unsigned next;
	int err;
	char msg[1024];       /* the first failure's message (ckpt_errmsg is per thread) */
};

static int put_part(struct mp *m, unsigned i)
{
	char q[1700];
	snprintf(q, sizeof q, "partNumber=%u&uploadId=%s", i + 1, m->eid);
	uint64_t off = (uint64_t)i * m->part_size;
	struct s3_req req = {
		.method = "PUT", .key = m->fkey, .query = q, .what = "put (part)", .src = m->src,
		.body_off = off, .body_len = MIN(m->part_size, m->src->len - off),
		.sent = s3_progress_sent, .canceled = s3_progress_canceled, .arg = m->prog,
	};
	int rc = s3_call(m->s, &req, NULL);
	if (rc == 0 && (!req.etag[0] || strpbrk(req.etag, "<&")))
		rc = ckpt_fail(CKPT_E_CORRUPT, "s3 put %s/%s: part %u: the answer has no usable ETag",
			       m->s->conf.bucket, m->fkey, i + 1);
	if (rc == 0)
		memcpy(m->etags[i], req.etag, sizeof req.etag);
	s3_req_free(&req);
	return rc;
}

static void *part_worker(void *arg)
{
	struct mp *m = arg;
	for (;;) {
		pthread_mutex_lock(&m->mu);
		unsigned i = m->next;
		int stop = m->err || i >= m->nparts;
		if (!stop)
			m->next++;
		pthread_mutex_unlock(&m->mu);
		if (stop)
			return NULL;
		int rc = s3_progress_canceled(m->prog)
			 ? ckpt_fail(CKPT_E_CANCELED, "s3 put %s/%s: canceled", m->s->conf.bucket,
				     m->fkey)
			 : put_part(m, i);
		if (rc) {
			pthread_mutex_lock(&m->mu);
			if (!m->err) {
				m->err = rc;
				snprintf(m->msg, sizeof m->msg, "%s", ckpt_errmsg());
			}
			pthread_mutex_unlock(&m->mu);
			/* parts in flight elsewhere (stalled, say) stop now, not after their retries */
			progress_stop(m->prog);
			return NULL;
		}
	}
}

/* Runs the parts on min(parallel, nparts) threads, this one included. */
static int put_parts(struct mp *m)
{
	unsigned nt = MIN(m->s->base.cfg.parallel, m->nparts), started = 0;
	pthread_t *t = calloc(nt, sizeof *t);
	for (unsigned i = 1; t && i < nt; i++, started++)
		if (pthread_create(&t[started], NULL, part_worker, m))
			break; /* fewer threads: slower, not wrong */
	part_worker(m);
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	free(t);
	return m->err ? ckpt_fail(-m->err, "%s", m->msg) : 0;
}

static int initiate(struct mp *m)
{
	struct s3_req req = { .method = "POST", .key = m->fkey, .query = "uploads=",
			      .what = "put (initiate multipart)" };
	char id[1024];
	int rc = s3_call(m->s, &req, NULL);
	if (rc == 0 && s3_xml_text((struct s3_span){ req.resp, req.resp_len }, "UploadId", id,
				   sizeof id) <= 0)
		rc = ckpt_fail(CKPT_E_CORRUPT, "s3 put %s/%s: the answer to initiate has no "
			       "UploadId", m->s->conf.bucket, m->fkey);
	if (rc == 0)
		rc = s3_encode(id, 0, m->eid, sizeof m->eid);
	s3_req_free(&req);
	return rc;
}

/* Best effort, one attempt bounded as a cleanup is (RMT_CLEANUP_S), even after a cancel: a
 * stalled server must not hold a failed or canceled put for another round of retries. A failed
 * abort leaves parts that the sweep (rmt_ops.sweep) or the bucket's lifecycle rule must collect,
 * so the message says so. Returns rc, the failure that made us abort, with its message kept. */
static int abort_upload(struct mp *m, int rc)
{
	char q[1700], msg[1024];
	snprintf(q, sizeof q, "uploadId=%s", m->eid);
	snprintf(msg, sizeof msg, "%s", ckpt_errmsg());
	struct s3_req req = { .method = "DELETE", .key = m->fkey, .query = q,
			      .what = "put (abort multipart)", .cleanup = 1 };
	static const long ok[] = { 200, 204, 404, 0 };
	if (s3_call(m->s, &req, ok)) {
		char why[512];
		snprintf(why, sizeof why, "%s", ckpt_errmsg());
		ckpt_fail(-rc, "%s; aborting upload %s failed, its parts stay until removed: %s", msg,
			  m->eid, why);
	} else {
		ckpt_fail(-rc, "%s", msg);
	}
	s3_req_free(&req);
	return rc;
}

/* The CompleteMultipartUpload body: every part's number and ETag. */
static char *complete_body(const struct mp *m, size_t *len)
{
	size_t cap = 64 + (size_t)m->nparts * 200, o = 0;
	char *b = malloc(cap);
	if (!b)
		return NULL;
	o += (size_t)snprintf(b, cap, "<CompleteMultipartUpload>");
	for (unsigned i = 0; i < m->nparts; i++)
		o += (size_t)snprintf(b + o, cap - o, "<Part><PartNumber>%u</PartNumber><ETag>%s"
				      "</ETag></Part>", i + 1, m->etags[i]);
	o += (size_t)snprintf(b + o, cap - o, "</CompleteMultipartUpload>");
	*len = o;
	return b;
}

/* A completion can fail inside a 200 (S3 streams the answer): an <Error> there counts, and
 * *again says whether it is worth another try. */
static int complete_once(struct mp *m, const char *body, size_t blen, int noreplace, int *again)
{
	char q[1700];
	snprintf(q, sizeof q, "uploadId=%s", m->eid);
	struct s3_req req = { .method = "POST", .key = m->fkey, .query = q, .body = body,
			      .body_len = blen, .what = "put (complete multipart)" };
	if (noreplace)
		req.hdr[0] = "If-None-Match: *";
	*again = 0;
	int rc = s3_call(m->s, &req, NULL);
	struct s3_span sp = { req.resp, req.resp_len }, inner;
	if (rc == 0 && s3_xml_next(&sp, "Error", &inner)) {
		req.status = 200;
		s3_xml_text(inner, "Code", req.code, sizeof req.code);
		*again = !strcmp(req.code, "InternalError") || !strcmp(req.code, "SlowDown");
		rc = s3_status_error(m->s, &req);
	} else if (rc == -CKPT_E_NOTFOUND && !strcmp(req.code, "NoSuchUpload")) {
		/* A retry after a lost answer (s3_do's or ours): the first completion went through. */
		uint64_t size;
		if (m->s->base.ops->stat(&m->s->base, m->fkey + strlen(m->s->conf.prefix), &size,
					 NULL) == 0 && size == m->src->len)
			rc = 0;
	}
	s3_req_free(&req);
	return rc;
}

static int complete(struct mp *m, int noreplace)
{
	size_t blen;
	char *body = complete_body(m, &blen);
	if (!body)
		return ckpt_fail(CKPT_E_NOMEM, "s3 put %s/%s: completion body of %u parts",
				 m->s->conf.bucket, m->fkey, m->nparts);
	int rc = 0, again = 1;
	for (unsigned k = 0; again && k <= m->s->base.cfg.retries; k++)
		rc = complete_once(m, body, blen, noreplace, &again);
	free(body);
	return rc;
}

/* NOREPLACE without an atomic server: refuse when the key is there now. */
static int check_absent(struct s3 *s, const char *fkey)
{
	uint64_t size;
	int rc = s->base.ops->stat(&s->base, fkey + strlen(s->conf.prefix), &size, NULL);
	if (rc == 0)
		return ckpt_fail(CKPT_E_EXISTS, "s3 put %s/%s: the key exists (%llu bytes)",
				 s->conf.bucket, fkey, (unsigned long long)size);
	return rc == -CKPT_E_NOTFOUND ? 0 : rc;
}

int s3_put_multipart(struct s3 *s, const char *fkey, const struct rmt_src *src, int noreplace,
		     rmt_progress_cb progress, void *arg)
{
	struct s3_progress prog = { .cb = progress, .arg = arg, .total = src->len };
	struct mp m = { .s = s, .fkey = fkey, .src = src, .prog = &prog,
			.part_size = s->base.cfg.part_size };
	if (m.part_size * S3_MAX_PARTS < src->len) /* S3 takes 10000 parts at most */
		m.part_size = ALIGN_UP((src->len + S3_MAX_PARTS - 1) / S3_MAX_PARTS, 1u << 20);
	m.nparts = (unsigned)((src->len + m.part_size - 1) / m.part_size);
	int rc = noreplace ? check_absent(s, fkey) : 0;
	if (rc)
		return rc;
	m.etags = calloc(m.nparts, sizeof *m.etags);
	if (!m.etags)
		return ckpt_fail(CKPT_E_NOMEM, "s3 put %s/%s: %u parts", s->conf.bucket, fkey,
				 m.nparts);
	pthread_mutex_init(&prog.mu, NULL);
	pthread_mutex_init(&m.mu, NULL);
	rc = initiate(&m);
	if (rc == 0) {
		rc = put_parts(&m);
		if (rc == 0 && noreplace)
			rc = check_absent(s, fkey);
		if (rc == 0)
			rc = complete(&m, noreplace);
		if (rc)
			rc = abort_upload(&m, rc);
	}
	pthread_mutex_destroy(&m.mu);
	pthread_mutex_destroy(&prog.mu);
	free(m.etags);
	return rc;
}
