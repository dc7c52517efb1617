/* A fixed pool of worker threads taking tasks from one FIFO queue. */
#ifndef CKPT_WORKERS_H
#define CKPT_WORKERS_H

struct task {
	void (*fn)(struct task *t);
	struct task *next;
};

struct workers;

/* Starts n threads. Returns NULL when none could be started. */
struct workers *workers_create(unsigned n);
/* Queues t; t->fn(t) runs on a worker thread. Urgent tasks run before every normal one (the
 * snapshot copies, which the trainer waits for, go ahead of background hashing and writing). */
void workers_submit(struct workers *w, struct task *t);
void workers_submit_urgent(struct workers *w, struct task *t);
/* Runs the queued tasks to completion, stops the threads, frees w; accepts NULL. */
void workers_destroy(struct workers *w);
unsigned workers_count(const struct workers *w);

#endif
