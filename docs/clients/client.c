/* A wcetd client in C with sd-bus: GetBound, GetCurve, MinPartition and Admission1.Check on the
 * daemon at $WCETD_BUS_ADDRESS; prints the answers and exits non-zero on any failure.
 * Build: gcc client.c $(pkg-config --cflags --libs libsystemd) -o client   (libsystemd-dev)
 * Usage: WCETD_BUS_ADDRESS=unix:path=... ./client [kernel] [sms]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>

#define NAME "org.wcetd.Wcetd1"
#define PATH "/org/wcetd/Wcetd1"

static int fail(const char *what, int r, const sd_bus_error *e) {
    fprintf(stderr, "client.c: %s: %s: %s\n", what, e && e->name ? e->name : "error",
            e && e->message ? e->message : strerror(-r));
    return 1;
}

/* Check(a(sasutt)) for one task running `kernel` once per 1 ms, its deadline `deadline`. */
static int check(sd_bus *bus, const char *kernel, uint32_t sms, uint64_t deadline) {
    sd_bus_message *m = NULL, *reply = NULL;
    sd_bus_error e = SD_BUS_ERROR_NULL;
    int admitted = 0, r;
    r = sd_bus_message_new_method_call(bus, &m, NAME, PATH, "org.wcetd.Admission1", "Check");
    if (r >= 0) r = sd_bus_message_append(m, "a(sasutt)", 1, "demo", 1, kernel, sms, (uint64_t)1000000, deadline);
    if (r >= 0) r = sd_bus_call(bus, m, 0, &e, &reply);
    if (r >= 0) r = sd_bus_message_read(reply, "b", &admitted);
    if (r >= 0) r = sd_bus_message_enter_container(reply, 'a', "(sttx)");
    const char *name;
    uint64_t response, partition;
    int64_t slack;
    while (r >= 0 && (r = sd_bus_message_read(reply, "(sttx)", &name, &response, &partition, &slack)) > 0)
        printf("Check: %s on %" PRIu64 " SMs responds in %" PRIu64 " ns (slack %" PRId64 " ns)\n", name, partition,
               response, slack);
    int status = r < 0 ? fail("Check", r, &e) : !admitted;
    if (r >= 0) printf("Check: %s\n", admitted ? "admitted" : "NOT admitted");
    sd_bus_error_free(&e);
    sd_bus_message_unref(m);
    sd_bus_message_unref(reply);
    return status;
}

int main(int argc, char **argv) {
    const char *address = getenv("WCETD_BUS_ADDRESS");
    const char *kernel = argc > 1 ? argv[1] : "needle";
    uint32_t sms = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 64;
    sd_bus *bus = NULL;
    sd_bus_message *reply = NULL;
    sd_bus_error e = SD_BUS_ERROR_NULL;
    uint64_t bound;
    uint32_t size, min;
    int r;
    if (!address) return fprintf(stderr, "client.c: set WCETD_BUS_ADDRESS to the daemon's bus address\n"), 1;
    if ((r = sd_bus_new(&bus)) < 0 || (r = sd_bus_set_address(bus, address)) < 0 ||
        (r = sd_bus_set_bus_client(bus, 1)) < 0 || (r = sd_bus_start(bus)) < 0)
        return fail("connecting", r, NULL);
    r = sd_bus_call_method(bus, NAME, PATH, "org.wcetd.Bounds1", "GetBound", &e, &reply, "su", kernel, sms);
    if (r < 0 || (r = sd_bus_message_read(reply, "t", &bound)) < 0) return fail("GetBound", r, &e);
    printf("GetBound(%s, %u) = %" PRIu64 " ns\n", kernel, sms, bound);
    reply = sd_bus_message_unref(reply);
    r = sd_bus_call_method(bus, NAME, PATH, "org.wcetd.Bounds1", "GetCurve", &e, &reply, "s", kernel);
    if (r < 0 || (r = sd_bus_message_enter_container(reply, 'a', "(ut)")) < 0) return fail("GetCurve", r, &e);
    printf("GetCurve(%s) =", kernel);
    uint64_t b;
    while ((r = sd_bus_message_read(reply, "(ut)", &size, &b)) > 0) printf(" %u:%" PRIu64, size, b);
    printf("\n");
    if (r < 0) return fail("GetCurve", r, &e);
    reply = sd_bus_message_unref(reply);
    r = sd_bus_call_method(bus, NAME, PATH, "org.wcetd.Bounds1", "MinPartition", &e, &reply, "st", kernel, bound);
    if (r < 0 || (r = sd_bus_message_read(reply, "u", &min)) < 0) return fail("MinPartition", r, &e);
    printf("MinPartition(%s, %" PRIu64 ") = %u SMs\n", kernel, bound, min);
    reply = sd_bus_message_unref(reply);
    int status = check(bus, kernel, sms, bound);
    sd_bus_unref(bus);
    return status;
}
