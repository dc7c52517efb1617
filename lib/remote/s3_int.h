/* The S3 backend's internals (lib/remote/s3_*.c, remote_s3.c; docs/remote-s3.md): where a remote
 * is (url, endpoint, credentials: s3_conf.c), the bounded XML reader for the server's answers
 * (s3_xml.c), one signed request with its retries (s3_http.c), multipart uploads
 * (s3_multipart.c). Internal to lib/remote; the tests include it to reach the parsers. */
#ifndef CKPT_S3_INT_H
#define CKPT_S3_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "remote/remote.h"

/* S3's limits: parts of 5 MiB at least (the last excepted), 10000 parts, 5 GiB a single PUT. */
#define S3_MIN_PART (5ull << 20)
#define S3_MAX_PARTS 10000u
#define S3_MAX_SINGLE (5ull << 30)

enum s3_addressing { S3_ADDR_AUTO, S3_ADDR_PATH, S3_ADDR_VIRTUAL };

/* Everything open needs to know, resolved from the url, the environment and the AWS files. */
struct s3_conf {
	char bucket[256];
	char prefix[1024];   /* "" or ending in '/' */
	char endpoint[512];  /* scheme://host[:port], no trailing '/' */
	char region[64];
	char access_key[256];
	char secret_key[256];
	char token[4096];    /* session token, "" when none */
	char profile[128];   /* the profile read, for messages */
	enum s3_addressing addressing; /* never AUTO once resolved */
	unsigned page;       /* max-keys of a listing page; 0: the server's (1000) */
	int noreplace;       /* -1: probe the server, 0: check first, 1: If-None-Match is atomic */
	int custom_endpoint; /* 1 when the endpoint came from the url, environment or profile */
	char cred_process[1024]; /* the profile's credential_process, "" when the keys are static */
	int64_t expires;     /* unix seconds the keys expire (credential_process), 0: never */
};

/* Fills *c from url ("s3://bucket[/prefix][?opt=v&...]"), the environment and the profile files
 * (docs/remote-s3.md says which wins). Returns 0, or -CKPT_E_INVAL naming the bad part (url,
 * option, file line), or -CKPT_E_PERM when no credentials are found anywhere. */
int s3_conf_resolve(const char *url, struct s3_conf *c);
/* The same with an explicit environment lookup, for the tests (getenv otherwise). */
int s3_conf_resolve_env(const char *url, struct s3_conf *c, const char *(*env)(const char *));

/* Runs c->cred_process (s3_cred.c) and sets c's keys, token and expires from the JSON it prints
 * (Version 1). Returns 0, or -CKPT_E_PERM naming the profile and the program's base name (never
 * the command line: it may hold secrets) and, when it failed, the first line of its standard
 * error: it could not run, exited non-zero, or printed no usable credentials (and then c is
 * unchanged). */
int s3_cred_process(struct s3_conf *c);

/* Reads key of section [sect] of an AWS ini file into out (outsz bytes); sub, when not NULL, is a
 * nested section ("s3" for "s3 =" followed by indented lines). Returns 1 when found, 0 when not
 * (no file, no section, no key), -CKPT_E_INVAL for an over-long value or line (naming the file). */
int s3_ini_get(const char *path, const char *sect, const char *sub, const char *key, char *out,
	       size_t outsz);

/* The XML reader: no allocation, no recursion, every scan bounded by the given length, entities
 * decoded (&amp; &lt; &gt; &quot; &apos; &#N; &#xN;). It finds elements by name, which is all
 * that S3's answers need; anything it cannot make sense of is "absent", never a crash. */
struct s3_span {
	const char *p;
	size_t n;
};
/* Finds the next element <tag>...</tag> in *in at or after its start, sets *inner to its content
 * and advances *in past it. Returns 1, or 0 when there is none (or it is not closed). */
int s3_xml_next(struct s3_span *in, const char *tag, struct s3_span *inner);
/* Copies the decoded text of the first <tag> in in into out (NUL-terminated). Returns its length,
 * -1 when absent, -2 when it does not fit in outsz or holds a bad entity. */
int s3_xml_text(struct s3_span in, const char *tag, char *out, size_t outsz);
/* The first <tag> as a decimal number; -1 when absent or not a number below 2^63. */
int64_t s3_xml_u64(struct s3_span in, const char *tag);
/* "2026-12-02T13:30:20.000Z" in unix seconds; 0 when malformed. */
int64_t s3_xml_time(const char *iso);

/* The open handle. */
struct s3 {
	struct rmt base;
	struct s3_conf conf;
	char userpwd[600];
	char sigv4[128];
	pthread_mutex_t mu;      /* guards the fields below */
	void **idle;             /* idle curl easy handles (their connections stay open) */
	size_t n_idle, cap_idle;
	double bw_next;          /* bandwidth cap: when the next byte may leave (ckpt_now) */
	int probed;              /* noreplace decided */
	uint64_t seed;           /* jitter */
};

/* One request. The caller sets the inputs; s3_do fills the outputs. */
struct s3_req {
	const char *method;      /* GET PUT HEAD DELETE POST */
	const char *key;         /* the full object key (prefix included), NULL for the bucket */
	const char *query;       /* already sorted and encoded (libcurl 7.88 signs it as given) */
	const char *what;        /* what is being done, for messages ("put", "list") */
	const char *hdr[4];      /* extra headers, "Name: value" */
	/* upload body: from a source (src->buf or src->fd at src->off + body_off) or a buffer */
	const struct rmt_src *src;
	uint64_t body_off, body_len;
	const char *body;        /* when src is NULL */
	/* download: into dst (at most dst_len bytes) or, when dst is NULL, into resp (malloc'd,
	 * bounded by S3_RESP_MAX) */
	void *dst;
	uint64_t dst_len;
	/* progress of this request's body (multipart adds its parts up) */
	void (*sent)(void *arg, int64_t n); /* n < 0: an attempt failed, its bytes go again */
	int (*canceled)(void *arg); /* asked while the request runs, waiting for its answer too */
	void *arg;
	/* A cleanup (the abort of a failed upload, a marker's delete): one attempt of at most
	 * min(timeout_s, RMT_CLEANUP_S) seconds, not stopped by rmt_cancel. */
	int cleanup;
	/* outputs */
	long status;
	char *resp;
	size_t resp_len;
	uint64_t got;            /* bytes written to dst */
	int64_t length;          /* Content-Length of the answer, -1 when none */
	int64_t mtime;           /* Last-Modified, 0 when none */
	char etag[128];
	char code[64];           /* the S3 error code of a failed request, "" when none */
	unsigned attempts;       /* how many times it was sent */
};
#define S3_RESP_MAX (16u << 20)

/* Sends req with up to cfg.retries retries of transient failures (connection errors, timeouts,
 * HTTP 5xx except 501/507, 429), with exponential backoff and jitter; a cleanup request once.
 * An attempt fails when no byte moves for cfg.timeout_s. req->canceled and the handle's
 * rmt_cancel stop it within about a second, waiting for the answer included. Returns 0 when an
 * answer came (any status: req->status, req->code), -CKPT_E_IO when none came (naming the endpoint
 * and curl's error), -CKPT_E_CANCELED, -CKPT_E_NOMEM. Thread-safe. */
int s3_do(struct s3 *s, struct s3_req *req);
/* Turns a failed answer (status >= 300) into the matching -CKPT_E_* with a message naming
 * bucket/key, the operation, the status and the S3 code. */
int s3_status_error(struct s3 *s, const struct s3_req *req);
/* 0 when req's status is one of ok (0-terminated; NULL: any 2xx), else s3_status_error. */
int s3_check(struct s3 *s, const struct s3_req *req, const long *ok);
/* s3_do, then s3_status_error unless the status is one of ok (0-terminated; NULL: 2xx). */
int s3_call(struct s3 *s, struct s3_req *req, const long *ok);
void s3_req_free(struct s3_req *req);
/* Percent-encodes in into out: everything but A-Z a-z 0-9 - . _ ~ (and '/' when keep_slash).
 * Returns 0, or -CKPT_E_INVAL when it does not fit. */
int s3_encode(const char *in, int keep_slash, char *out, size_t outsz);
/* The full key of key under the remote's prefix into out. -CKPT_E_INVAL: empty or too long. */
int s3_full_key(struct s3 *s, const char *key, char *out, size_t outsz);
/* Copies the handle's keys into ak, sk, tok (the sizes of struct s3_conf's), after running the
 * credential_process again when they expire within 5 minutes (a failed refresh keeps keys that
 * have not expired yet). Returns 0 or the refresh's error. Thread-safe (under s->mu). */
int s3_cred_current(struct s3 *s, char *ak, char *sk, char *tok);
/* Frees the idle curl handles. */
void s3_http_fini(struct s3 *s);

/* Multipart upload of src to full key (s3_multipart.c): parts of cfg.part_size, cfg.parallel in
 * flight, completed or aborted (all or nothing). noreplace: check before starting and before
 * completing (and If-None-Match on the completion). Returns 0 or -CKPT_E_*. */
int s3_put_multipart(struct s3 *s, const char *fkey, const struct rmt_src *src, int noreplace,
		     rmt_progress_cb progress, void *arg);
/* Shared progress state of one put (several threads of one call add to it). */
struct s3_progress {
	pthread_mutex_t mu;
	rmt_progress_cb cb;
	void *arg;
	uint64_t total, done, reported;
	double polled;  /* when cb was last called (ckpt_now) */
	int canceled;
};
void s3_progress_sent(void *arg, int64_t n);
/* Whether the put is canceled; asks cb again (done unchanged) when it was last called over
 * 0.2 s ago, so that a cancel reaches a request that waits for its answer. */
int s3_progress_canceled(void *arg);

/* For the tests: creates the bucket of s (PUT bucket), counts the multipart uploads in progress
 * under the prefix. Return 0 or -CKPT_E_*. */
int s3_make_bucket(struct rmt *r);
int s3_count_uploads(struct rmt *r, unsigned *n);
/* Opens without checking that the bucket exists (for s3_make_bucket). */
int s3_open_unchecked(const char *url, const struct rmt_config *cfg, struct rmt **out);

#endif
