package io.tidemark.delta;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.InterruptedIOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import io.delta.storage.CloseableIterator;
import io.delta.storage.LineCloseableIterator;
import io.delta.storage.LogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;

/**
 * A Delta Lake {@link LogStore} for S3 through Hadoop's S3A connector whose commits are
 * <b>put-if-absent on the server</b>, so any number of writers (Spark drivers in different
 * processes or hosts, and delta-rs) can commit to one table without losing a commit.
 *
 * <h2>Why</h2>
 * Delta needs mutual exclusion on {@code _delta_log/<version>.json}: of two writers that commit the
 * same version, exactly one may win and the other must see
 * {@link java.nio.file.FileAlreadyExistsException}, after which Delta checks the winning commit for
 * conflicts and retries at the next version. Delta's stock {@code S3SingleDriverLogStore} gets that
 * from a lock inside one JVM plus S3A's plain {@code create(path, overwrite=false)}, which on S3 is
 * an existence check followed by an unconditional PUT: a commit another process makes in between is
 * silently overwritten. {@code S3DynamoDBLogStore} is not available here (see
 * docs/OBJECT_STORAGE_NOTES.md).
 *
 * <h2>How</h2>
 * S3 (since August 2024, and S3-compatible stores that implement it) rejects a PUT carrying
 * {@code If-None-Match: *} with {@code 412 Precondition Failed} when the key exists, atomically on
 * the server. Hadoop 3.5.0's S3A sends that header when a file is created with
 * {@code fs.createFile(path).overwrite(false).must("fs.option.create.conditional.overwrite", true)}
 * (on the single PUT, or on CompleteMultipartUpload for a large file), and reports the 412 at
 * {@code close()} as {@code org.apache.hadoop.fs.s3a.RemoteFileChangedException}. delta-rs commits
 * with the same header, so Spark and delta-rs writers share one mechanism on one table.
 *
 * <p>{@link #write} with {@code overwrite = false}:
 * <ol>
 *   <li>serializes the actions (one JSON line each) into memory and uploads them with the
 *       conditional create; no existence probe first (S3A skips its own probes for conditional
 *       creates, and the server's answer is the only one that counts);</li>
 *   <li>412 (the key exists): reads the existing object back. If it holds exactly the bytes of this
 *       commit, an earlier attempt of this same call landed and its response was lost (S3A and the
 *       AWS SDK re-send a PUT after a connection failure; the re-sent one then finds its own object),
 *       so the write has succeeded and returns normally. Otherwise another writer won the version:
 *       throws {@link FileAlreadyExistsException}, with the S3A exception as its cause;</li>
 *   <li>409 {@code ConditionalRequestConflict} (S3's answer while another conditional write of the
 *       same key is in flight): tries again, up to {@value #CONFLICT_ATTEMPTS} attempts with a
 *       growing pause; the next answer is then a 412 or a success;</li>
 *   <li>anything else propagates unchanged (Delta fails the commit; nothing was overwritten).</li>
 * </ol>
 * With {@code overwrite = true} (Delta uses it for {@code _last_checkpoint}) it is a plain
 * {@code create(path, true)}. A single PUT or a completed multipart upload becomes visible whole,
 * so {@link #isPartialWriteVisible} is {@code false}. {@link #listFrom} lists the directory (S3
 * listings are strongly consistent since December 2020) and sorts by file name.
 *
 * <h2>Configuration</h2>
 * <pre>
 * spark.delta.logStore.s3a.impl=io.tidemark.delta.S3ConditionalPutLogStore
 * spark.delta.logStore.s3.impl=io.tidemark.delta.S3ConditionalPutLogStore   # s3:// paths, with
 * spark.hadoop.fs.s3.impl=org.apache.hadoop.fs.s3a.S3AFileSystem
 * </pre>
 * The jar (built by {@code make jars}, in {@code .cache/jars/spark}) must be on the driver's
 * classpath. S3A's {@code fs.s3a.create.conditional.enabled} must stay {@code true} (its default);
 * otherwise, and on any file system without the conditional create capability, {@link #write}
 * refuses with an {@link IOException} rather than write unsafely. The object store must honour
 * {@code If-None-Match: *} on PUT: AWS S3 does, as does the local test server; a store that ignores
 * the header would make this class as unsafe as the stock one, so check a new store first (see the
 * conditional-PUT tests in tests/integration/test_object_store_server.py).
 *
 * <p>Constructed by Delta through the {@code (Configuration)} constructor; stateless and
 * thread-safe (there is deliberately no in-JVM lock: the server arbitrates, also between threads).
 */
public class S3ConditionalPutLogStore extends LogStore {

    /** The S3A create option (Hadoop 3.5.0) that adds {@code If-None-Match: *}; also its path capability. */
    public static final String CONDITIONAL_OVERWRITE = "fs.option.create.conditional.overwrite";

    /** Attempts of one conditional create while S3 answers 409 ConditionalRequestConflict. */
    static final int CONFLICT_ATTEMPTS = 5;

    private static final long CONFLICT_PAUSE_MILLIS = 100;
    private static final String REMOTE_FILE_CHANGED = "org.apache.hadoop.fs.s3a.RemoteFileChangedException";

    /** How a failed conditional create ended, read from its exception's cause chain. */
    public enum Failure { KEY_EXISTS, IN_FLIGHT_CONFLICT, OTHER }

    public S3ConditionalPutLogStore(Configuration initHadoopConf) {
        super(initHadoopConf);
    }

    @Override
    public CloseableIterator<String> read(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        return new LineCloseableIterator(
            new BufferedReader(new InputStreamReader(fs.open(path), StandardCharsets.UTF_8)));
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        byte[] body = serialize(actions);
        if (overwrite) {
            try (FSDataOutputStream out = fs.create(path, true)) {
                out.write(body);
            }
            return;
        }
        if (!fs.hasPathCapability(path, CONDITIONAL_OVERWRITE)) {
            throw new IOException(getClass().getSimpleName() + " cannot write " + path
                + " put-if-absent: " + fs.getClass().getName() + " has no conditional create ("
                + CONDITIONAL_OVERWRITE + "); it needs S3A from Hadoop 3.5+ with "
                + "fs.s3a.create.conditional.enabled=true");
        }
        for (int attempt = 1; ; attempt++) {
            try {
                createIfAbsent(fs, path, body);
                return;
            } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
                // Not raised by S3A for a conditional create (it skips its probes), but it means the same.
                throw versionTaken(path, e);
            } catch (IOException e) {
                switch (classify(e)) {
                    case KEY_EXISTS:
                        if (holds(fs, path, body)) {
                            return; // our own earlier attempt landed; see the class comment
                        }
                        throw versionTaken(path, e);
                    case IN_FLIGHT_CONFLICT:
                        if (attempt < CONFLICT_ATTEMPTS) {
                            pause(CONFLICT_PAUSE_MILLIS * attempt);
                            continue;
                        }
                        throw e;
                    default:
                        throw e;
                }
            }
        }
    }

    @Override
    public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        String from = path.getName();
        List<FileStatus> found = new ArrayList<>();
        // FileNotFoundException when the directory does not exist, as Delta expects.
        RemoteIterator<FileStatus> listing = fs.listStatusIterator(path.getParent());
        while (listing.hasNext()) {
            FileStatus status = listing.next();
            if (status.getPath().getName().compareTo(from) >= 0) {
                found.add(status);
            }
        }
        found.sort(Comparator.comparing(status -> status.getPath().getName()));
        return found.iterator();
    }

    @Override
    public Path resolvePathOnPhysicalStorage(Path path, Configuration hadoopConf) throws IOException {
        return path.getFileSystem(hadoopConf).makeQualified(path);
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }

    /** One PUT with {@code If-None-Match: *}; S3A reports a 412 when the stream is closed. */
    private static void createIfAbsent(FileSystem fs, Path path, byte[] body) throws IOException {
        try (FSDataOutputStream out = (FSDataOutputStream) fs.createFile(path)
                .overwrite(false)
                .must(CONDITIONAL_OVERWRITE, true)
                .build()) {
            out.write(body);
        }
    }

    private static byte[] serialize(Iterator<String> actions) {
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        while (actions.hasNext()) {
            buffer.writeBytes((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
        return buffer.toByteArray();
    }

    /** Whether {@code path} holds exactly {@code body} (reads at most one byte more than it). */
    private static boolean holds(FileSystem fs, Path path, byte[] body) throws IOException {
        try (InputStream in = fs.open(path)) {
            return Arrays.equals(in.readNBytes(body.length + 1), body);
        } catch (FileNotFoundException e) {
            return false;
        }
    }

    private static FileAlreadyExistsException versionTaken(Path path, Throwable cause) {
        FileAlreadyExistsException taken = new FileAlreadyExistsException(
            path.toString(), null, "another writer committed this file first (conditional PUT refused)");
        taken.initCause(cause);
        return taken;
    }

    /**
     * Reads a failed conditional create's cause chain: S3A turns a 412 into
     * {@code RemoteFileChangedException} (also for a CompleteMultipartUpload answered 200 with error
     * code PreconditionFailed) and a 409 into {@code AWSBadRequestException}, both wrapping the AWS
     * SDK's {@code S3Exception}. Matched by class name and by a reflective {@code statusCode()} so that
     * this jar compiles against, and links with, nothing beyond hadoop-client-api and delta-storage.
     * Public for tests; not an API.
     */
    public static Failure classify(Throwable failure) {
        Failure seen = Failure.OTHER;
        Map<Throwable, Boolean> visited = new IdentityHashMap<>();
        for (Throwable t = failure; t != null && visited.put(t, true) == null; t = t.getCause()) {
            int status = statusCode(t);
            if (REMOTE_FILE_CHANGED.equals(t.getClass().getName()) || status == 412) {
                return Failure.KEY_EXISTS;
            }
            if (status == 409) {
                seen = Failure.IN_FLIGHT_CONFLICT;
            }
        }
        return seen;
    }

    private static int statusCode(Throwable t) {
        try {
            Method method = t.getClass().getMethod("statusCode");
            return method.getReturnType() == int.class ? (Integer) method.invoke(t) : -1;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return -1;
        }
    }

    private static void pause(long millis) throws InterruptedIOException {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            InterruptedIOException interrupted = new InterruptedIOException("interrupted while retrying a commit");
            interrupted.initCause(e);
            throw interrupted;
        }
    }
}
