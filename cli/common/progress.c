/* A progress line for long operations, shown only on a terminal: label, bar, share, bytes done
 * of the total, rate and time left. Each redraw returns to the start of the line and clears it
 * ("\r" then "\033[K"), so that a shorter line leaves no characters of the longer one behind;
 * the end clears the line, leaving the terminal as it was for what the command prints next. */
#include "cli.h"

#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void draw(struct progress *p, double t);

/* The line on the terminal now, for progress_interrupt(). */
static struct progress *active;

void progress_start(struct progress *p, const char *label, uint64_t total, bool enable)
{
	p->on = enable && isatty(STDERR_FILENO);
	p->label = label;
	p->total = total;
	p->done = 0;
	p->start = now_s();
	p->last_draw = 0;
	p->drawn = false;
	if (p->on) {
		active = p;
		p->last_draw = p->start;
		draw(p, p->start); /* at once: even a short operation shows what it does */
	}
}

/* "1:05" or "2:03:07"; "--:--" while the rate is unknown. */
static const char *fmt_eta(double s, char *buf, size_t len)
{
	if (!(s >= 0) || s > 360000) {
		snprintf(buf, len, "--:--");
		return buf;
	}
	unsigned long t = (unsigned long)(s + 0.5);
	if (t >= 3600)
		snprintf(buf, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, len, "%lu:%02lu", t / 60, t % 60);
	return buf;
}

static void draw(struct progress *p, double t)
{
	char a[32], b[32], r[32], e[32];
	int width = 30;
	double frac = p->total ? (double)p->done / (double)p->total : 1.0;
	if (frac > 1)
		frac = 1;
	int fill = (int)(frac * width);
	double el = t - p->start, rate = el > 0 ? (double)p->done / el : 0;
	fprintf(stderr, "\r\033[K%s [", p->label);
	for (int i = 0; i < width; i++)
		fputc(i < fill ? '#' : '.', stderr);
	fprintf(stderr, "] %3d%% %s / %s", (int)(frac * 100), cli_fmt_iec(p->done, a, sizeof a),
		cli_fmt_iec(p->total, b, sizeof b));
	if (rate > 0)
		fprintf(stderr, ", %s/s, ETA %s", cli_fmt_iec((uint64_t)rate, r, sizeof r),
			fmt_eta((double)(p->total > p->done ? p->total - p->done : 0) / rate, e,
				sizeof e));
	else
		fprintf(stderr, ", ETA --:--");
	fflush(stderr);
	p->drawn = true;
}

void progress_update(struct progress *p, uint64_t done)
{
	if (!p->on)
		return;
	p->done = done;
	double t = now_s();
	if (t - p->last_draw < 0.1)
		return;
	p->last_draw = t;
	draw(p, t);
}

void progress_clear(struct progress *p)
{
	if (!p->on || !p->drawn)
		return;
	fputs("\r\033[K", stderr);
	fflush(stderr);
	p->drawn = false;
	p->last_draw = 0; /* the next update draws again at once */
}

void progress_end(struct progress *p)
{
	progress_clear(p);
	p->on = false;
	if (active == p)
		active = NULL;
}

void progress_interrupt(void)
{
	if (active)
		progress_clear(active);
}
