/* Report production launch times to wcetd without blocking the launch path (C, sd-bus).
 *
 * A scheduler copies the reporter: wcetd_reporter_record() is called on the launch path and only
 * writes into a lock-free single-producer ring (no bus, no lock, no allocation; when the ring is
 * full the time is dropped and counted); a thread of the reporter's own drains the ring and sends
 * the times with org.wcetd.Monitor1.Report, in batches. One reporter per (kernel, partition size)
 * and launching thread; sd-bus objects are used by the reporter thread only (sd-bus is not
 * thread-safe).
 *
 * While wcetd is not on the bus (restarting, or the bus itself restarting), the times stay in the
 * ring and are sent when it is back (when the ring fills meanwhile, new times are dropped and
 * counted): a launch time that would raise a bound (rule 1) must not be lost to a restart. A
 * report the daemon refused is not retried (the error says what was wrong). A call that got no
 * reply may have been counted before the daemon went away; sent again it is counted twice, which
 * raises no bound that one copy would not.
 *
 * Reporting needs root, the daemon's user, or membership of group `wcetd` or `wcetd-report`.
 *
 * Build: gcc -std=c11 -pthread reporter.c $(pkg-config --cflags --libs libsystemd) -o reporter
 * Demo:  WCETD_BUS_ADDRESS=unix:path=... ./reporter [kernel] [sms] [count]
 *        reports times below the bound and one above it, then prints GetObserved.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <time.h>

#define NAME "org.wcetd.Wcetd1"
#define PATH "/org/wcetd/Wcetd1"
#define RING 65536 /* a power of two, and the most times one Report may carry */
/* The daemon refuses a time of 0 or above an hour, and one refused time refuses its whole call:
 * such times are counted here and never sent. */
#define MAX_TIME_NS 3600000000000ULL

struct wcetd_reporter {
    char kernel[65];
    uint32_t sms;
    uint64_t ring[RING];
    uint64_t batch[RING]; /* the reporter thread's copy of what it sends */
    _Atomic uint64_t head; /* written by the launch path */
    _Atomic uint64_t tail; /* written by the reporter thread */
    _Atomic uint64_t dropped; /* ring full, or a time the daemon would refuse */
    _Atomic int closing;
    uint64_t sent, failed;
    int away; /* the last send did not reach the daemon: said once, until one does */
    unsigned wait_s; /* how long close() waits for a daemon that is away */
    char address[512];
    sd_bus *bus; /* NULL after the bus itself went away: connected again at the next send */
    pthread_t thread;
};

static int open_bus(const char *address, sd_bus **bus);

/* The daemon is not on the bus, or did not answer: the times are kept and sent again. (A failure
 * of the connection itself is judged by the caller, on the connection: sd-bus gives it an error
 * name of its own, System.Error.ENOTCONN and the like.) */
static int daemon_away(const sd_bus_error *e) {
    static const char *away[] = {"org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
                                 "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Disconnected",
                                 "org.freedesktop.DBus.Error.Timeout"};
    for (size_t i = 0; e->name && i < sizeof away / sizeof *away; i++)
        if (!strcmp(e->name, away[i])) return 1;
    return 0;
}

/* The launch path. */
void wcetd_reporter_record(struct wcetd_reporter *r, uint64_t time_ns) {
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (time_ns == 0 || time_ns > MAX_TIME_NS ||
        head - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING) {
        atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
        return;
    }
    r->ring[head % RING] = time_ns;
    atomic_store_explicit(&r->head, head + 1, memory_order_release);
}

/* Send everything in the ring (at most RING times per call). Returns 1 when it is empty. The ring
 * gives the times up only once the daemon has them, or refused them. */
static int flush(struct wcetd_reporter *r) {
    uint64_t *batch = r->batch;
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    size_t n = 0;
    for (; tail != head; tail++) batch[n++] = r->ring[tail % RING];
    if (n == 0) return 1;
    sd_bus_message *m = NULL;
    sd_bus_error e = SD_BUS_ERROR_NULL;
    int rc = r->bus ? 0 : open_bus(r->address, &r->bus);
    if (rc >= 0) rc = sd_bus_message_new_method_call(r->bus, &m, NAME, PATH, "org.wcetd.Monitor1", "Report");
    if (rc >= 0) rc = sd_bus_message_append(m, "su", r->kernel, r->sms);
    if (rc >= 0) rc = sd_bus_message_append_array(m, 't', batch, n * sizeof(uint64_t));
    if (rc >= 0) rc = sd_bus_call(r->bus, m, 0, &e, NULL);
    /* The bus itself went away (or could not be reached again): connect again next time. */
    int bus_gone = rc < 0 && (!r->bus || sd_bus_is_open(r->bus) <= 0);
    int away = bus_gone || (rc < 0 && daemon_away(&e));
    if (away) {
        if (!r->away)
            fprintf(stderr, "reporter.c: wcetd is away (%s): keeping %zu times to send when it is back\n",
                    e.name ? e.name : strerror(-rc), n);
        if (bus_gone) r->bus = sd_bus_flush_close_unref(r->bus);
    } else if (rc < 0) {
        /* A refused report is not retried: the message says what was wrong. */
        fprintf(stderr, "reporter.c: Report: %s: %s\n", e.name ? e.name : "error", e.message ? e.message : strerror(-rc));
        r->failed += n;
    } else {
        r->sent += n;
    }
    r->away = away;
    if (!away) atomic_store_explicit(&r->tail, tail, memory_order_release);
    sd_bus_error_free(&e);
    sd_bus_message_unref(m);
    return !away && tail == atomic_load_explicit(&r->head, memory_order_acquire);
}

static void *run(void *arg) {
    struct wcetd_reporter *r = arg;
    const struct timespec pause = {0, 100 * 1000 * 1000}; /* 100 ms between batches */
    while (!atomic_load(&r->closing)) {
        nanosleep(&pause, NULL);
        flush(r);
    }
    /* Closing: what is left, waiting up to wait_s for a daemon that is away. */
    for (unsigned tries = 0; !flush(r); tries++) {
        if (tries >= 10 * r->wait_s) {
            uint64_t left = atomic_load(&r->head) - atomic_load(&r->tail);
            fprintf(stderr, "reporter.c: %" PRIu64 " times unsent at close: wcetd is away\n", left);
            r->failed += left;
            break;
        }
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* A connection to the bus at `address`, or NULL in *bus and the error. */
static int open_bus(const char *address, sd_bus **bus) {
    int r;
    *bus = NULL;
    if ((r = sd_bus_new(bus)) < 0 || (r = sd_bus_set_address(*bus, address)) < 0 ||
        (r = sd_bus_set_bus_client(*bus, 1)) < 0 || (r = sd_bus_start(*bus)) < 0) {
        *bus = sd_bus_unref(*bus);
        return r;
    }
    return 0;
}

/* `wait_s`: how long wcetd_reporter_close() waits for a daemon that is away. */
struct wcetd_reporter *wcetd_reporter_open(const char *address, const char *kernel, uint32_t sms, unsigned wait_s) {
    struct wcetd_reporter *r = calloc(1, sizeof *r);
    if (!r || strlen(kernel) >= sizeof r->kernel || strlen(address) >= sizeof r->address) return free(r), NULL;
    strcpy(r->kernel, kernel);
    strcpy(r->address, address);
    r->sms = sms;
    r->wait_s = wait_s;
    if (open_bus(address, &r->bus) < 0 || pthread_create(&r->thread, NULL, run, r) != 0) {
        sd_bus_unref(r->bus);
        free(r);
        return NULL;
    }
    return r;
}

/* Send what is queued, stop the thread, free. Returns the times dropped or refused. */
uint64_t wcetd_reporter_close(struct wcetd_reporter *r, uint64_t *sent) {
    atomic_store(&r->closing, 1);
    pthread_join(r->thread, NULL);
    uint64_t lost = atomic_load(&r->dropped) + r->failed;
    *sent = r->sent;
    sd_bus_unref(r->bus);
    free(r);
    return lost;
}

int main(int argc, char **argv) {
    const char *address = getenv("WCETD_BUS_ADDRESS");
    const char *kernel = argc > 1 ? argv[1] : "hotspot";
    uint32_t sms = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 64;
    uint64_t count = argc > 3 ? strtoull(argv[3], NULL, 10) : 5000;
    sd_bus *bus = NULL;
    sd_bus_message *reply = NULL;
    sd_bus_error e = SD_BUS_ERROR_NULL;
    uint64_t bound, sent;
    int r;
    /* WCETD_REPORT_BOUND: the bound to report around, without asking (the daemon may be away: the
     * reporter then keeps the times until it is back, up to WCETD_REPORT_WAIT_S seconds). */
    const char *given = getenv("WCETD_REPORT_BOUND"), *wait = getenv("WCETD_REPORT_WAIT_S");
    if (!address) return fprintf(stderr, "reporter.c: set WCETD_BUS_ADDRESS to the daemon's bus address\n"), 1;
    if ((r = open_bus(address, &bus)) < 0) return fprintf(stderr, "reporter.c: connecting: %s\n", strerror(-r)), 1;
    if (given && *given) {
        bound = strtoull(given, NULL, 10);
    } else {
        r = sd_bus_call_method(bus, NAME, PATH, "org.wcetd.Bounds1", "GetBound", &e, &reply, "su", kernel, sms);
        if (r < 0 || (r = sd_bus_message_read(reply, "t", &bound)) < 0)
            return fprintf(stderr, "reporter.c: GetBound: %s\n", e.message ? e.message : strerror(-r)), 1;
        reply = sd_bus_message_unref(reply);
    }
    printf("GetBound(%s, %u) = %" PRIu64 " ns\n", kernel, sms, bound);

    struct wcetd_reporter *rep = wcetd_reporter_open(address, kernel, sms, wait ? (unsigned)strtoul(wait, NULL, 10) : 10);
    if (!rep) return fprintf(stderr, "reporter.c: cannot start the reporter\n"), 1;
    for (uint64_t i = 0; i + 1 < count; i++) wcetd_reporter_record(rep, bound / 2 + i % (bound / 4)); /* stand-ins */
    wcetd_reporter_record(rep, bound + 1000); /* one launch over its bound */
    uint64_t lost = wcetd_reporter_close(rep, &sent);
    printf("reported %" PRIu64 " times, lost %" PRIu64 "\n", sent, lost);
    /* The bus may have restarted while the reporter waited: ask on a connection of now. */
    bus = sd_bus_unref(bus);
    if ((r = open_bus(address, &bus)) < 0) return fprintf(stderr, "reporter.c: connecting: %s\n", strerror(-r)), 1;

    r = sd_bus_call_method(bus, NAME, PATH, "org.wcetd.Monitor1", "GetObserved", &e, &reply, "su", kernel, sms);
    if (r < 0 || (r = sd_bus_message_enter_container(reply, 'a', "{sv}")) < 0)
        return fprintf(stderr, "reporter.c: GetObserved: %s\n", e.message ? e.message : strerror(-r)), 1;
    printf("GetObserved(%s, %u):", kernel, sms);
    const char *key;
    while ((r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
        uint64_t v;
        if (sd_bus_message_read(reply, "s", &key) < 0) break;
        const char *type;
        sd_bus_message_peek_type(reply, NULL, &type);
        if (strcmp(type, "t") == 0 && sd_bus_message_read(reply, "v", "t", &v) >= 0 &&
            (!strcmp(key, "count") || !strcmp(key, "overruns") || !strcmp(key, "max_ns") || !strcmp(key, "p99_ns")))
            printf(" %s=%" PRIu64, key, v);
        else
            sd_bus_message_skip(reply, "v");
        sd_bus_message_exit_container(reply);
    }
    printf("\n");
    sd_bus_message_unref(reply);
    sd_bus_unref(bus);
    return lost != 0 || r < 0;
}
