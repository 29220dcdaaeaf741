#!/usr/bin/env bash
# The Python executor SDK in CI (run by .ci/run once the carillon binary is built): the wheel
# and the sdist built by PEP 517, mypy --strict, Python 3.9 syntax (vermin), then the wheel
# installed into a fresh virtual environment and the test suite run from it against real
# nodes on SQLite, PostgreSQL and MariaDB.
#   bash sdk/python/ci.sh TARGET_DIR      (TARGET_DIR holds debug/carillon)
set -euo pipefail
target=$(cd "$1" && pwd)
cd "$(dirname "$0")"
tools="$target/py-sdk-tools"
pins=('build==1.6.1' 'mypy==2.4.1' 'vermin==1.9.2' 'pytest==9.2.0' 'httpx==0.28.1' 'uvicorn==0.54.0'
      'opentelemetry-api==1.45.2')
# The traces test's app exports with OpenTelemetry's SDK; its receiver decodes with the proto.
otel=('opentelemetry-sdk==1.45.2' 'opentelemetry-exporter-otlp-proto-http==1.45.2'
      'opentelemetry-proto==1.45.2')
# The executor inside an existing service: Starlette (what FastAPI builds on), Flask (WSGI).
service=('starlette==1.10.0' 'flask==3.1.3')

if [ ! -x "$tools/bin/mypy" ] || ! "$tools/bin/python" -c "import opentelemetry.trace" 2>/dev/null; then
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
fi

echo "--> wheel and sdist"
rm -rf "$target/py-sdk-dist"
"$tools/bin/python" -m build --outdir "$target/py-sdk-dist" . >/dev/null
ls "$target/py-sdk-dist"

echo "--> mypy --strict"
"$tools/bin/mypy"

echo "--> runs on Python 3.9 and later"
"$tools/bin/vermin" --target=3.9- --violations --no-tips --quiet src/carillon_executor

echo "--> the wheel in a fresh virtual environment, and the tests"
fresh="$target/py-sdk-venv"
rm -rf "$fresh"
python3 -m venv "$fresh"
wheel=$(ls "$target"/py-sdk-dist/*.whl)
"$fresh/bin/pip" install --quiet --disable-pip-version-check "$wheel[opentelemetry]" 'pytest==9.2.0' \
    "${otel[@]}" "${service[@]}"
CARILLON_BIN="$target/debug/carillon" CARILLON_SDK_FROM_WHEEL=1 \
    "$fresh/bin/python" -m pytest -q -p no:cacheprovider tests
