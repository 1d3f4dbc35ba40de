#!/usr/bin/env bash
# Resolve the JVM artifacts Tidemark needs from Maven Central into .cache/jars/.
#   .cache/jars/spark : Spark's Kafka source, Delta Lake, the S3A connector (minus what the pyspark
#                       wheel ships), Tidemark's own Delta LogStore for S3A
#                       (tidemark-delta-logstore.jar, built from jvm/logstore with `mvn package`), and
#                       its Protobuf decoder (tidemark-protobuf.jar, built from jvm/protobuf with javac
#                       against the wheel's jars and the set's protobuf-java)
#   .cache/jars/kafka : the Apache Kafka broker and its tools, with a log4j2 binding
# Idempotent and keyed on the poms: each set lives in a folder named after a hash of its pom
# (.cache/jars/spark-<hash>), and .cache/jars/spark is a symbolic link to the current one. A set is
# re-resolved only when its pom (or jvm/settings.xml) changed; the Spark set's key also covers
# jvm/logstore and jvm/protobuf (their every source file), so editing either rebuilds the set. A new set
# is resolved, trimmed and completed in a scratch folder, renamed to its final name, and only then
# does the link move, with one atomic rename: a job that lists .cache/jars/spark sees the old
# complete set or the new one, never a half-written folder. The previous set is kept (JVMs started from it may still open its jars);
# older ones are removed. Needs: mvn, and the venv (for the list of jars pyspark already ships).
# A completed set is also kept once per user, in TIDEMARK_USER_JAR_CACHE (~/.cache/tidemark/jars), under the same
# name: a second checkout (a fresh clone's `make test`) takes it from there with hard links instead of running
# Maven five times and building the LogStore (34 s of a fresh clone's setup).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib/user_cache.sh"
venv=${VENV:-$root/.venv}
cache=${TIDEMARK_JAR_CACHE:-$root/.cache/jars}
user_cache=${TIDEMARK_USER_JAR_CACHE:-$user_cache_root/jars}

set_hash() {  # set_hash POM_DIR [FILE...]: the key of a set: its pom, the Maven settings it resolves
  # with, and the files (relative name and content) of anything built into it. With no FILE the
  # key is the same as before the LogStore existed, so the Kafka set is not re-resolved.
  local pom=$1 f
  shift
  { cat "$pom/pom.xml" "$root/jvm/settings.xml"
    for f in "$@"; do printf '\n%s\n' "${f#"$root"/}"; cat "$f"; done
  } | sha256sum | cut -c1-12
}

logstore=$root/jvm/logstore
logstore_files() {  # every file the LogStore jar is built from, in a stable order
  find "$logstore/pom.xml" "$logstore/src" -type f | LC_ALL=C sort
}

# Build Tidemark's Delta LogStore (jvm/logstore; Maven Central only, through jvm/settings.xml) and put
# its jar into a set being assembled. The build directory is a hidden scratch folder under the cache,
# one per set, so neither the source tree nor a set already in use is touched.
build_logstore() {  # build_logstore SET_DIR HASH
  local build=$cache/.logstore-build-$2
  echo "tidemark: building the Delta LogStore (jvm/logstore) into $1"
  rm -rf "$build"
  mvn -q -B -s "$root/jvm/settings.xml" -f "$logstore/pom.xml" -Dtidemark.buildDir="$build" package \
      >"$cache/logstore-mvn.log" 2>&1 && [ -f "$build/tidemark-delta-logstore.jar" ] || {
    echo "tidemark: building jvm/logstore failed; see $cache/logstore-mvn.log" >&2
    tail -30 "$cache/logstore-mvn.log" >&2
    rm -rf "$build" "$1"
    exit 1
  }
  cp "$build/tidemark-delta-logstore.jar" "$1/"
  rm -rf "$build"
}

protobuf_files() {  # every file the Protobuf decoder's jar is built from, in a stable order
  find "$root/jvm/protobuf/src" -type f | LC_ALL=C sort
}

# Build Tidemark's Protobuf decoder (jvm/protobuf: a Spark UDF over protobuf-java's dynamic messages) into a
# set being assembled: javac against the pyspark wheel's jars and the set's own (protobuf-java), no Maven
# project, since Spark's API jars are the wheel's. A fixed date makes the jar the same from the same sources.
build_protobuf() {  # build_protobuf SET_DIR HASH
  local build=$cache/.protobuf-build-$2 pyspark_jars
  pyspark_jars=$("$venv/bin/python" -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  echo "tidemark: building the Protobuf decoder (jvm/protobuf) into $1"
  rm -rf "$build" && mkdir -p "$build/classes"
  { javac --release 17 -Xlint:all,-path,-serial -Werror -d "$build/classes" -cp "$pyspark_jars/*:$1/*" \
        $(protobuf_files) \
      && jar --create --date=2026-01-01T00:00:00Z --file "$build/tidemark-protobuf.jar" -C "$build/classes" .
  } >"$cache/protobuf-javac.log" 2>&1 || {
    echo "tidemark: building jvm/protobuf failed; see $cache/protobuf-javac.log" >&2
    tail -30 "$cache/protobuf-javac.log" >&2
    rm -rf "$build" "$1"
    exit 1
  }
  cp "$build/tidemark-protobuf.jar" "$1/"
  rm -rf "$build"
}

# Drop jars the pyspark wheel already has (same artifact, any version): two copies of one
# library on Spark's classpath is a classic source of NoSuchMethodError.
drop_pyspark_jars() {  # drop_pyspark_jars DIR
  local pyspark_jars j
  pyspark_jars=$("$venv/bin/python" -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  artifact() { basename "$1" .jar | sed -E 's/-[0-9][0-9A-Za-z.+_-]*$//'; }
  declare -A shipped=()
  for j in "$pyspark_jars"/*.jar; do shipped[$(artifact "$j")]=1; done
  for j in "$1"/*.jar; do
    if [ -n "${shipped[$(artifact "$j")]:-}" ]; then rm -f "$j"; fi
  done
}

keep_for_user() {  # keep_for_user NAME HASH DIR: a copy (hard links) of a completed set for the user's other checkouts
  local kept=$user_cache/$1-$2 tmp d
  [ -f "$kept/.complete" ] && return 0
  mkdir -p "$user_cache" || return 0
  tmp=$user_cache/.$1-$2.$$
  rm -rf "$tmp"
  link_copy "$3" "$tmp" && mv -T "$tmp" "$kept" 2>/dev/null
  rm -rf "$tmp"
  for d in "$user_cache/$1"-*/; do  # sets of older poms
    [ "$d" = "$kept/" ] || rm -rf "$d"
  done
  return 0
}

fetch() {  # fetch NAME POM_DIR [FILE...] (files built into the set, part of its key)
  local name=$1 pom=$2 hash link=$cache/$1 dest
  shift 2
  hash=$(set_hash "$pom" "$@")
  dest=$cache/$name-$hash
  if [ -L "$link" ] && [ "$(readlink "$link")" = "$name-$hash" ] && [ -f "$dest/.complete" ]; then
    keep_for_user "$name" "$hash" "$dest"
    return 0
  fi
  if [ ! -f "$dest/.complete" ] && [ -f "$user_cache/$name-$hash/.complete" ]; then
    echo "tidemark: $name jars (pom hash $hash) from $user_cache"
    rm -rf "$dest.tmp"
    link_copy "$user_cache/$name-$hash" "$dest.tmp"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
  fi
  if [ ! -f "$dest/.complete" ]; then
    echo "tidemark: resolving $name jars from Maven Central into $dest (pom hash $hash)"
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    mvn -q -B -s "$root/jvm/settings.xml" -f "$pom/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$dest.tmp" >"$cache/$name-mvn.log" 2>&1 || {
      echo "tidemark: Maven could not resolve the $name jars; see $cache/$name-mvn.log" >&2
      tail -20 "$cache/$name-mvn.log" >&2
      rm -rf "$dest.tmp"
      exit 1
    }
    if [ "$name" = spark ]; then
      drop_pyspark_jars "$dest.tmp"
      build_logstore "$dest.tmp" "$hash"
      build_protobuf "$dest.tmp" "$hash"
    fi
    if [ "$name" = connect ]; then resolve_connect_plugins "$dest.tmp" "$pom"; fi
    echo "$hash" >"$dest.tmp/.complete"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    keep_for_user "$name" "$hash" "$dest"
  fi
  # Swap the link. A real folder left by an older version of this script is moved aside first
  # (once; the only moment the path is briefly absent).
  local previous=""
  if [ -L "$link" ]; then
    previous=$(readlink "$link")
  elif [ -e "$link" ]; then
    previous=$name-legacy
    rm -rf "${cache:?}/$previous" && mv "$link" "$cache/$previous"
  fi
  ln -sfn "$name-$hash" "$cache/.$name.link" && mv -T "$cache/.$name.link" "$link"
  # Keep the current and the previous set; remove older ones.
  local d base
  for d in "$cache/$name"-*/; do
    base=$(basename "$d")
    case "$base" in "$name-$hash" | "$previous" | *.tmp) ;; *) rm -rf "${cache:?}/$base" ;; esac
  done
}

mkdir -p "$cache"
fetch kafka "$root/jvm/kafka"
mapfile -t logstore_sources < <(logstore_files)
mapfile -t protobuf_sources < <(protobuf_files)
fetch spark "$root/jvm/spark" "${logstore_sources[@]}" "${protobuf_sources[@]}"
echo "tidemark: jars ready: $(ls "$cache"/spark/*.jar | wc -l) for Spark, $(ls "$cache"/kafka/*.jar | wc -l) for the Kafka broker"

# --- Kafka Connect and the Debezium PostgreSQL connector (scripts/cdc.sh; issue 39) ---------------------
#   .cache/jars/connect                             the standalone worker's classpath (jvm/connect/pom.xml,
#                                                   profile `runtime`, active by default: the generic fetch)
#   .cache/jars/connect/plugins/debezium-postgres   the connector, for the worker's plugin.path (profile
#                                                   `debezium`), so it loads in its own class loader
#   .cache/jars/connect/plugins/apicurio-converter  Apicurio's AvroConverter (profile `apicurio`; CDC_FORMAT=avro)
# Keyed (the pom and the manifest of jvm/connect/apicurio-services), swapped and pruned like the sets above.
resolve_connect_plugins() {  # resolve_connect_plugins SET_DIR POM_DIR
  local plugin=$1/plugins/debezium-postgres
  local converter=$1/plugins/apicurio-converter
  mkdir -p "$plugin" "$converter"
  { mvn -q -B -s "$root/jvm/settings.xml" -f "$2/pom.xml" -P '!runtime,debezium' dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$plugin" \
    && mvn -q -B -s "$root/jvm/settings.xml" -f "$2/pom.xml" -P '!runtime,apicurio' dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$converter"; } >"$cache/connect-plugins-mvn.log" 2>&1 \
      && ls "$plugin"/debezium-connector-postgres-*.jar "$converter"/apicurio-registry-utils-converter-*.jar \
        >/dev/null 2>&1 || {
    echo "tidemark: Maven could not resolve the Debezium connector or Apicurio's converter; see $cache/connect-plugins-mvn.log" >&2
    tail -20 "$cache/connect-plugins-mvn.log" >&2
    rm -rf "$1"
    exit 1
  }
  # Apicurio's converter jar has no ServiceLoader manifest; with one (jvm/connect/apicurio-services, a jar of
  # just that file), the worker finds it with plugin.discovery=service_load instead of a reflective scan of
  # every plugin (7 s to start, not 30 s).
  jar cf "$converter/tidemark-apicurio-converter-services.jar" -C "$2/apicurio-services" META-INF
}
fetch connect "$root/jvm/connect" "$root/jvm/connect/apicurio-services/META-INF/services/org.apache.kafka.connect.storage.Converter"
echo "tidemark: jars ready: $(ls "$cache"/connect/*.jar | wc -l) for Kafka Connect, $(ls "$cache"/connect/plugins/debezium-postgres/*.jar | wc -l) for its Debezium PostgreSQL plugin, $(ls "$cache"/connect/plugins/apicurio-converter/*.jar | wc -l) for the Avro converter"
