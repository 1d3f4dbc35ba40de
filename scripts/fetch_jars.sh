#!/usr/bin/env bash
# Resolve the JVM artifacts Tidemark needs from Maven Central, once, into .cache/jars/.
#   .cache/jars/spark : Spark's Kafka source + Delta Lake (minus what the pyspark wheel ships)
#   .cache/jars/kafka : the Apache Kafka broker and its tools, with a log4j2 binding
# Idempotent: a folder with a .complete marker is left alone. Needs: mvn, and the venv (for
# the list of jars pyspark already ships).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$root/.venv}
cache=${TIDEMARK_JAR_CACHE:-$root/.cache/jars}

fetch() {  # fetch NAME POM_DIR
  local name=$1 pom=$2 dest=$cache/$1
  if [ -f "$dest/.complete" ]; then return 0; fi
  echo "tidemark: resolving $name jars from Maven Central into $dest"
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  mvn -q -B -s "$root/jvm/settings.xml" -f "$pom/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$dest.tmp" >"$cache/$name-mvn.log" 2>&1 || {
    echo "tidemark: Maven could not resolve the $name jars; see $cache/$name-mvn.log" >&2
    tail -20 "$cache/$name-mvn.log" >&2
    exit 1
  }
  rm -rf "$dest" && mv "$dest.tmp" "$dest" && touch "$dest/.complete"
}

mkdir -p "$cache"
fetch kafka "$root/jvm/kafka"
fetch spark "$root/jvm/spark"

# Drop jars the pyspark wheel already has (same artifact, any version): two copies of one
# library on Spark's classpath is a classic source of NoSuchMethodError.
pyspark_jars=$("$venv/bin/python" -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
artifact() { basename "$1" .jar | sed -E 's/-[0-9][0-9A-Za-z.+_-]*$//'; }
declare -A shipped=()
for j in "$pyspark_jars"/*.jar; do shipped[$(artifact "$j")]=1; done
for j in "$cache"/spark/*.jar; do
  if [ -n "${shipped[$(artifact "$j")]:-}" ]; then rm -f "$j"; fi
done
echo "tidemark: jars ready: $(ls "$cache"/spark/*.jar | wc -l) for Spark, $(ls "$cache"/kafka/*.jar | wc -l) for the Kafka broker"
