/* relay.h: publishes committed runs and outbox rows to RabbitMQ with
 * pipelined publisher confirms (the planner's steps 3 and 4,
 * docs/design.md §5.3, §5.4).
 *
 * Runs: in due order, in batches (one transaction each: select FOR UPDATE
 * SKIP LOCKED, publish the batch, wait for every confirm, mark the acked ones
 * published, commit). A run not yet due goes to the classic delay queue of
 * its due second (warren.delay.<epoch s>; with planner.delay_ring = N the
 * quorum or classic ring slot warren.delay.ring.<s mod N>) with expiration =
 * (due - planner.release_lead) - now in ms, rounded up (released that much
 * early: the claim and the C worker hold it until due); a run already that
 * close to due goes straight to warren.ready. Publishes are mandatory: a
 * returned message is recorded on the run (last_error) and retried later,
 * never counted as published. A run that cannot be published at all
 * (WARREN_EINVAL: a payload that is not a JSON object, a body over the cap,
 * a time that is not finite) is recorded dead with its dead letter, and the
 * batch goes on.
 * Outbox rows: in id order, with confirms, deleted after their ack; a row
 * RabbitMQ cannot take as written goes to warren.dead as a stand-in.
 *
 * Private to the library (planner.c drives it) and its tests: no program
 * needs it (a program runs a planner through <warren/planner.h>). */
#ifndef WARREN_RELAY_H
#define WARREN_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include <warren/broker.h>
#include <warren/config.h>
#include <warren/error.h>
#include <warren/log.h>
#include <warren/store.h>

typedef struct warren_relay warren_relay;

/* st and b are borrowed (the planner owns them); b may be swapped after a
 * reconnect with warren_relay_set_broker (it must already be in confirm
 * mode). pc is copied. lg borrowed (may be NULL). *out is new. */
int warren_relay_new(warren_store *st, warren_broker *b, const warren_planner_config *pc,
                     const warren_logger *lg, warren_relay **out, warren_error *err);
void warren_relay_free(warren_relay *r);
void warren_relay_set_broker(warren_relay *r, warren_broker *b);

/* Fault-test hook: sleep ms after publishing a batch, before its confirms. */
void warren_relay_set_stall(warren_relay *r, int64_t ms);

/* Publishes runs due within lead_ms (the planner passes its horizon, capped
 * below the delay queues' x-expires) until none is left or budget_ms has
 * passed. *published / *unroutable (may be NULL) get counts for this call. */
int warren_relay_runs(warren_relay *r, int64_t lead_ms, int64_t budget_ms, int *published,
                      int *unroutable, warren_error *err);

/* Publishes and deletes outbox rows, in id order, until none is left or
 * budget_ms passed. During a backlog of events (1,000 or more) events younger
 * than planner.event_defer wait for a later call; dead letters never wait. */
int warren_relay_outbox(warren_relay *r, int64_t budget_ms, int *published, warren_error *err);

/* Removes whitespace outside strings from JSON text in place (jsonb's text
 * form "{"a": 1}" becomes "{"a":1}"); returns the new length. */
size_t warren_json_compact_inplace(char *json);

#endif
