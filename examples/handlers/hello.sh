#!/bin/sh
# hello.sh: the smallest exec handler. warren runs it with the run's payload
# (a JSON object) on stdin and the run's facts in the environment; exit 0
# means success, 75 retry, 64/65 permanent failure, anything else retry.
payload=$(cat)
echo "hello from ${WARREN_JOB:-?}: run ${WARREN_RUN_KEY:-?} attempt ${WARREN_ATTEMPT:-?} payload ${payload}"
exit 0
