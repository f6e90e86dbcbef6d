#!/bin/sh
# once.sh: the handler of the example's one-shot job (at = "..."): it runs
# once for its single run key, however often the config is synced.
cat >/dev/null
echo "once: ${WARREN_RUN_KEY:-?} scheduled ${WARREN_SCHEDULED_AT:-?}"
exit 0
