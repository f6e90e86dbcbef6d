#!/bin/sh
# flaky.sh: fails its first attempt with exit 75 ("try again"), so the
# example shows a retry with backoff; later attempts succeed. The run key
# ($WARREN_RUN_KEY) is the idempotency key to use for any side effect.
cat >/dev/null
if [ "${WARREN_ATTEMPT:-1}" -le 1 ]; then
    echo "flaky: ${WARREN_RUN_KEY:-?} attempt ${WARREN_ATTEMPT:-?}: failing on purpose, retry" >&2
    exit 75
fi
echo "flaky: ${WARREN_RUN_KEY:-?} attempt ${WARREN_ATTEMPT:-?}: ok"
exit 0
