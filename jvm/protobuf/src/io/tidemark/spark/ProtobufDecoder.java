package io.tidemark.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.InvalidProtocolBufferException;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * Record values -> the reader message's fields as a Spark row, or a {@link BadRecord} saying why not, with one batch's
 * frozen schemas (the JSON of {@code tidemark.formats.protobuf_schemas.FrozenProtobuf}, plus {@code row}: the reader
 * message's Spark type as DDL). The checks and their words are those of {@code tidemark.formats.protobuf_decode},
 * the Python decoder the tests hold this one to: the header, the schema id, the message indexes, the body (does not
 * parse, holds undeclared fields, lacks required ones), then the values a column cannot hold exactly
 * ({@link RowReader}). A schema id's descriptors are built the first time a record carries it.
 */
final class ProtobufDecoder {
    private static final int HEADER_BYTES = 5;

    private final JsonNode frozen;
    private final String subject;
    private final String message;
    private final StructType shape;
    private final Map<Integer, Writer> writers = new ConcurrentHashMap<>();
    private final Map<Integer, String> unreadable = new HashMap<>();

    /** One readable schema id: its version, the reader message's path in its file, its messages, its reader. */
    private record Writer(int version, List<Integer> path, Map<List<Integer>, Descriptor> messages,
                          Descriptor descriptor, RowReader.Step read) {
    }

    ProtobufDecoder(String json) {
        try {
            frozen = new ObjectMapper().readTree(json);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        subject = frozen.get("subject").asText();
        message = frozen.get("message").asText();
        shape = (StructType) DataType.fromDDL(frozen.get("row").asText());
        frozen.get("unreadable").properties().forEach(e -> unreadable.put(Integer.valueOf(e.getKey()),
                e.getValue().asText()));
    }

    Object decode(byte[] value) throws BadRecord {
        int schemaId = header(value);
        String refused = unreadable.get(schemaId);
        if (refused != null) {
            throw new BadRecord(refused);
        }
        Writer writer = writers.get(schemaId);
        if (writer == null) {
            writer = writer(schemaId);
        }
        if (writer == null) {
            throw new BadRecord("schema id " + schemaId + " is not a version of subject '" + subject
                    + "' in the Schema Registry (as of plan time)");
        }
        int[] start = new int[1];
        List<Integer> path = messageIndexes(value, schemaId, start);
        if (!path.equals(writer.path())) {
            Descriptor named = writer.messages().get(path);
            if (named == null) {
                throw new BadRecord("message indexes " + path + " name no message of schema id " + schemaId
                        + " (version " + writer.version() + ")");
            }
            throw new BadRecord("message indexes " + path + " name message '" + named.getFullName() + "' of schema id "
                    + schemaId + ", not the reader message '" + message + "'");
        }
        DynamicMessage record = parse(writer.descriptor(), value, start[0], schemaId);
        if (RowReader.holdsUnknownFields(record)) {
            String where = where(schemaId);
            TreeSet<Integer> numbers = new TreeSet<>(record.getUnknownFields().asMap().keySet());
            String inside = numbers.isEmpty() ? " (in a nested message)"
                    : " (field numbers " + String.join(", ", numbers.stream().map(String::valueOf).toList()) + ")";
            throw new BadRecord("the Protobuf body holds fields that " + where + " does not declare, or declares "
                    + "with another wire type" + inside + ": not a record of that message");
        }
        if (!record.isInitialized()) {
            throw new BadRecord("the Protobuf body lacks required fields of " + where(schemaId) + ": "
                    + String.join(", ", record.findInitializationErrors()));
        }
        return writer.read().read(record);
    }

    private String where(int schemaId) {
        return "message '" + message + "' of schema id " + schemaId;
    }

    private DynamicMessage parse(Descriptor descriptor, byte[] value, int start, int schemaId) throws BadRecord {
        try {
            DynamicMessage.Builder builder = DynamicMessage.newBuilder(descriptor);
            builder.mergeFrom(CodedInputStream.newInstance(value, start, value.length - start));
            return builder.buildPartial(); // a missing required field is the next check's, with its names
        } catch (InvalidProtocolBufferException e) {
            // The Python decoder's words (upb's), so a dead letter's reason does not depend on the decoder.
            String why = String.valueOf(e.getMessage()).contains("UTF-8") ? "String field had bad UTF-8"
                    : "Wire format was corrupt";
            throw new BadRecord("the Protobuf body does not decode as " + where(schemaId) + ": " + why);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private Writer writer(int schemaId) {
        String key = Integer.toString(schemaId);
        if (!frozen.get("writers").has(key)) {
            return null;
        }
        return writers.computeIfAbsent(schemaId, id -> {
            FileDescriptor file = loadFile(Base64.getDecoder().decode(frozen.get("descriptors").get(key).asText()),
                    frozen.get("files").get(key).asText());
            Map<List<Integer>, Descriptor> messages = messagesByPath(file);
            List<Integer> path = new ArrayList<>();
            frozen.get("writers").get(key).forEach(n -> path.add(n.asInt()));
            int version = frozen.get("versions").get(key).asInt();
            Descriptor descriptor = messages.get(path);
            String where = "schema id " + schemaId + " (version " + version + ")";
            return new Writer(version, path, messages, descriptor, RowReader.struct(descriptor, shape, "", where));
        });
    }

    /** The file {@code name} of a serialized FileDescriptorSet, its imports built from the same set. */
    static FileDescriptor loadFile(byte[] descriptorSet, String name) {
        try {
            Map<String, FileDescriptorProto> protos = new HashMap<>();
            for (FileDescriptorProto proto : FileDescriptorSet.parseFrom(descriptorSet).getFileList()) {
                protos.put(proto.getName(), proto);
            }
            return build(name, protos, new HashMap<>());
        } catch (InvalidProtocolBufferException | DescriptorValidationException e) {
            throw new IllegalArgumentException("the descriptor set does not load (" + e.getMessage() + ")", e);
        }
    }

    private static FileDescriptor build(String name, Map<String, FileDescriptorProto> protos,
                                        Map<String, FileDescriptor> built) throws DescriptorValidationException {
        FileDescriptor done = built.get(name);
        if (done != null) {
            return done;
        }
        FileDescriptorProto proto = protos.get(name);
        if (proto == null) {
            throw new IllegalArgumentException("the descriptor set holds no file '" + name + "'");
        }
        List<FileDescriptor> dependencies = new ArrayList<>();
        for (String dependency : proto.getDependencyList()) {
            dependencies.add(build(dependency, protos, built));
        }
        FileDescriptor file = FileDescriptor.buildFrom(proto, dependencies.toArray(new FileDescriptor[0]));
        built.put(name, file);
        return file;
    }

    /** Every message of a file by its message-index path, as the Confluent wire format numbers them. */
    static Map<List<Integer>, Descriptor> messagesByPath(FileDescriptor file) {
        Map<List<Integer>, Descriptor> found = new HashMap<>();
        walk(file.getMessageTypes(), new ArrayList<>(), found);
        return found;
    }

    private static void walk(List<Descriptor> messages, List<Integer> prefix, Map<List<Integer>, Descriptor> found) {
        for (int i = 0; i < messages.size(); i++) {
            List<Integer> path = new ArrayList<>(prefix);
            path.add(i);
            found.put(List.copyOf(path), messages.get(i));
            walk(messages.get(i).getNestedTypes(), path, found);
        }
    }

    // --- the Confluent wire format (tidemark.formats.protobuf_wire) ---------------------------------------------

    static int header(byte[] value) throws BadRecord {
        if (value == null) {
            throw new BadRecord("value is null (a tombstone), not a Protobuf record");
        }
        if (value.length < HEADER_BYTES) {
            throw new BadRecord("value of " + value.length + " bytes is shorter than the " + HEADER_BYTES
                    + "-byte Confluent header");
        }
        if (value[0] != 0) {
            throw new BadRecord("magic byte is " + (value[0] & 0xFF) + ", not 0: not the Confluent wire format");
        }
        return ((value[1] & 0xFF) << 24) | ((value[2] & 0xFF) << 16) | ((value[3] & 0xFF) << 8) | (value[4] & 0xFF);
    }

    /** The message-index path after the header; {@code start[0]} is set to where the body starts. */
    static List<Integer> messageIndexes(byte[] value, int schemaId, int[] start) throws BadRecord {
        String bad = "the message-index list after schema id " + schemaId + " ";
        String tail = ": not a Confluent Protobuf value";
        long[] read = varint(value, HEADER_BYTES);
        if (read == null) {
            throw new BadRecord(bad + "is cut short" + tail);
        }
        long count = zigzag(read[0]);
        int pos = (int) read[1];
        if (count == 0) {
            start[0] = pos;
            return List.of(0);
        }
        if (count < 0) {
            throw new BadRecord(bad + "has a negative count (" + count + ")" + tail);
        }
        if (count > value.length - pos) {
            throw new BadRecord(bad + "is cut short (a count of " + count + ", " + (value.length - pos)
                    + " bytes left)" + tail);
        }
        List<Long> indexes = new ArrayList<>();
        for (long i = 0; i < count; i++) {
            read = varint(value, pos);
            if (read == null) {
                throw new BadRecord(bad + "is cut short" + tail);
            }
            indexes.add(zigzag(read[0]));
            pos = (int) read[1];
        }
        List<Integer> path = new ArrayList<>();
        for (Iterator<Long> it = indexes.iterator(); it.hasNext();) {
            long index = it.next();
            if (index < 0 || index > Integer.MAX_VALUE) {
                throw new BadRecord(bad + "holds a negative index (" + indexes + ")" + tail);
            }
            path.add((int) index);
        }
        start[0] = pos;
        return List.copyOf(path);
    }

    /** An unsigned varint at {@code pos}: {value, the position after it}, or null when cut short or too long. */
    private static long[] varint(byte[] data, int pos) {
        long value = 0;
        for (int shift = 0; shift <= 63; shift += 7) {
            if (pos >= data.length) {
                return null;
            }
            byte b = data[pos++];
            value |= (long) (b & 0x7F) << shift;
            if ((b & 0x80) == 0) {
                return new long[] {value, pos};
            }
        }
        return null;
    }

    private static long zigzag(long value) {
        return (value >>> 1) ^ -(value & 1);
    }
}
