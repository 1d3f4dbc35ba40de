#!/usr/bin/env bash
# A local Confluent-compatible Schema Registry: Apicurio Registry 3 (its Quarkus app, from Maven
# Central) on 127.0.0.1, with in-memory storage and no authentication.
#   scripts/registry.sh up | down | status | wait | env
# Clients use its Confluent-compatible API at http://127.0.0.1:<port>/apis/ccompat/v7 (`env` prints it
# as SCHEMA_REGISTRY_URL); Apicurio's own API is at /apis/registry/v3.
# Environment: REGISTRY_PORT (8081), REGISTRY_MANAGEMENT_PORT (REGISTRY_PORT+1: Quarkus's health and
# metrics interface, also on 127.0.0.1), REGISTRY_HOME (.cache/registry-<port>: logs, pid),
# REGISTRY_HEAP (256m), REGISTRY_COMPATIBILITY (BACKWARD, Confluent's default; Apicurio's own is NONE:
# any change accepted), REGISTRY_JAVA_HOME (a JDK 21+; otherwise JAVA_HOME, `java` on PATH or
# /usr/lib/jvm/*, the first that is 21 or newer), REGISTRY_START_TIMEOUT (90 s).
# The app is downloaded once per user into REGISTRY_CACHE (~/.cache/tidemark/registry, shared by every checkout;
# checked against Maven Central's .sha1) and unpacked there, under a lock.
# State lives in the server's memory (an in-memory H2 database): `down` (or a crash) forgets every schema.
# `up` is idempotent: a live server is left alone, a stale pid file is cleared.
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
source "$(dirname "$0")/lib/user_cache.sh"
port=${REGISTRY_PORT:-8081}
mport=${REGISTRY_MANAGEMENT_PORT:-$((port + 1))}
home=${REGISTRY_HOME:-$root/.cache/registry-$port}
heap=${REGISTRY_HEAP:-256m}
compatibility=${REGISTRY_COMPATIBILITY:-BACKWARD}
version=3.3.3
cache=${REGISTRY_CACHE:-$user_cache_root/registry}
name=apicurio-registry-app-$version
url=https://repo.maven.apache.org/maven2/io/apicurio/apicurio-registry-app/$version/$name-all.tar.gz
tarball=$cache/$name-all.tar.gz
app=$cache/$name
base=http://127.0.0.1:$port
ccompat=$base/apis/ccompat/v7
service=registry pidfile=$home/server.pid logfile=$home/logs/server.log where="on $base"
start_timeout=${REGISTRY_START_TIMEOUT:-90}

fetch_app() {  # download (temp file + rename, sha1-checked) and unpack, once, one checkout at a time
  mkdir -p "$cache"
  exec {lock}>"$cache/.lock"
  flock "$lock"
  if [ ! -f "$tarball" ]; then
    echo "registry: downloading Apicurio Registry $version (about 160 MB) into $cache"
    local started=$SECONDS part="$tarball.part"
    rm -f "$part"
    curl -fL --retry 3 --retry-delay 2 --connect-timeout 20 -sS -o "$part" "$url" \
      || { rm -f "$part"; echo "registry: downloading $url failed" >&2; exit 1; }
    local expected
    if expected=$(curl -fsSL --retry 3 --connect-timeout 20 "$url.sha1" 2>/dev/null); then
      expected=${expected%% *}
      local actual; actual=$(sha1sum "$part" | cut -d' ' -f1)
      if [ "$actual" != "$expected" ]; then
        rm -f "$part"
        echo "registry: the download's SHA-1 is $actual, Maven Central publishes $expected; removed, try again" >&2
        exit 1
      fi
    else
      echo "registry: no .sha1 next to $url; the download is unchecked" >&2
    fi
    mv "$part" "$tarball"
    echo "registry: downloaded in $((SECONDS - started)) s"
  fi
  if [ ! -f "$app/.unpacked" ]; then
    local tmp="$cache/.unpack.$$"
    rm -rf "$tmp" "$app"
    mkdir -p "$tmp"
    tar -xzf "$tarball" -C "$tmp" \
      || { rm -rf "$tmp"; echo "registry: unpacking $tarball failed; delete it to download again" >&2; exit 1; }
    mv "$tmp" "$app"
    touch "$app/.unpacked"
  fi
  exec {lock}>&-
}

runnable() {  # the Quarkus fast-jar launcher inside the unpacked app
  local jar; jar=$(find "$app" -name quarkus-run.jar -path '*quarkus-app*' 2>/dev/null | head -1)
  [ -n "$jar" ] || jar=$(find "$app" -name quarkus-run.jar 2>/dev/null | head -1)
  [ -n "$jar" ] || { echo "registry: no quarkus-run.jar under $app; delete $cache and try again" >&2; exit 1; }
  echo "$jar"
}

java_major() {  # java_major JAVA_BINARY: its feature version (8 for 1.8.0, 25 for 25.0.3), or nothing
  local line v
  line=$("$1" -version 2>&1 | grep -m1 -E 'version "' || true)
  v=${line#*version \"}; v=${v%%\"*}
  [ -n "$line" ] && [ -n "$v" ] || return 1
  case "$v" in 1.*) v=${v#1.} ;; esac
  echo "${v%%[.+-]*}"
}

find_java() {  # the first Java 21+ of: REGISTRY_JAVA_HOME, JAVA_HOME, `java` on PATH, /usr/lib/jvm/*
  local tried=() candidates=() c major
  [ -n "${REGISTRY_JAVA_HOME:-}" ] && candidates+=("$REGISTRY_JAVA_HOME/bin/java")
  [ -n "${JAVA_HOME:-}" ] && candidates+=("$JAVA_HOME/bin/java")
  command -v java >/dev/null 2>&1 && candidates+=("$(command -v java)")
  for c in /usr/lib/jvm/*/bin/java; do [ -e "$c" ] && candidates+=("$c"); done
  for c in "${candidates[@]}"; do
    if [ -x "$c" ] && major=$(java_major "$c") && [ "${major:-0}" -ge 21 ] 2>/dev/null; then
      echo "$c"; return 0
    fi
    tried+=("$c (${major:-not runnable})")
    major=
  done
  {
    echo "registry: Apicurio Registry $version needs Java 21 or newer; none found. Tried:"
    if [ ${#tried[@]} -eq 0 ]; then echo "  (nothing: REGISTRY_JAVA_HOME and JAVA_HOME unset, no java on PATH, none in /usr/lib/jvm)"; fi
    for c in "${tried[@]}"; do echo "  $c"; done
    echo "registry: install a JDK 21+ (e.g. apt-get install openjdk-21-jdk-headless or Temurin 21/25),"
    echo "registry: or point REGISTRY_JAVA_HOME at one (REGISTRY_JAVA_HOME=/path/to/jdk scripts/registry.sh up)"
  } >&2
  return 1
}

answers() { curl -fsS -o /dev/null --max-time 5 "$ccompat/subjects"; }

cmd_env() { echo "SCHEMA_REGISTRY_URL=$ccompat"; }

cmd_up() {
  service_already_up && return 0
  service_port_free "$port" REGISTRY_PORT
  service_port_free "$mport" "REGISTRY_MANAGEMENT_PORT (health, metrics; REGISTRY_PORT+1 by default)"
  local java; java=$(find_java) || exit 1
  fetch_app
  local jar; jar=$(runnable)
  mkdir -p "$home/tmp"
  local started=$SECONDS
  # System properties override the app's application.properties:
  #  - the API on 127.0.0.1:$port only; Quarkus's management interface (health, metrics), which the
  #    app binds to 0.0.0.0:9000 (the local S3 server's port) by default, on 127.0.0.1:$mport;
  #  - storage: SQL on an in-memory H2 database (Apicurio 3's default, spelled out), a small pool;
  #  - no authentication (OIDC and basic auth off) and no authorization;
  #  - a global compatibility rule, BACKWARD like Confluent's default (Apicurio's own default is none);
  #  - a modest heap and a serial GC: the machine also runs Kafka, Spark and Airflow.
  service_launch "$home" "$java" -Xms64m -Xmx"$heap" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Djava.io.tmpdir="$home/tmp" \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" \
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$mport" \
    -Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2 \
    -Dapicurio.datasource.jdbc.initial-size=2 -Dapicurio.datasource.jdbc.min-size=2 \
    -Dapicurio.datasource.jdbc.max-size=10 \
    -Dquarkus.oidc.tenant-enabled=false -Dapicurio.authn.basic-client-credentials.enabled=false \
    -Dapicurio.auth.role-based-authorization=false -Dapicurio.auth.owner-only-authorization=false \
    -Dapicurio.rules.global.compatibility="$compatibility" \
    -jar "$jar"
  service_await_start
  echo "registry: Apicurio Registry $version ready on $base in $((SECONDS - started)) s (pid $(service_pid), $java, logs in $home/logs)"
  echo "registry: SCHEMA_REGISTRY_URL=$ccompat (Confluent-compatible API; in memory, no auth)"
}

cmd_down() {
  service_down "(its schemas were in memory and are gone)"
  rm -rf "$home/tmp"
}

service_main "up|down|status|wait|env" "$@"
