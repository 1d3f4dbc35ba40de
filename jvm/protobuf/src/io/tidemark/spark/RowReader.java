package io.tidemark.spark;

import java.math.BigDecimal;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

import com.google.protobuf.ByteString;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumDescriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Message;

import org.apache.spark.sql.catalyst.expressions.GenericRow;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A writer's message read as the reader's Spark type, the steps built once per schema id
 * ({@code tidemark.formats.protobuf_types} says what each field kind becomes; {@code tidemark.formats.protobuf_decode}
 * is the Python decoder this one matches). Fields match by name: a reader field the writer lacks is null. A field
 * with presence that the record does not set is null; repeated and map fields are empty, never null; a map's
 * entries are in key order, the last of a key winning. A leaf is written as the reader's type: the plan allowed only
 * exact widenings (an int into a bigint or a double, an integer into a decimal that holds it, a float into a double).
 */
final class RowReader {
    static final String TIMESTAMP = "google.protobuf.Timestamp";
    private static final long MIN_SECONDS = -62_135_596_800L;
    private static final long MAX_SECONDS = 253_402_300_799L;
    private static final DateTimeFormatter SECONDS = DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss");
    /** The well-known wrapper messages: a column of the wrapped value's type, null when unset. */
    private static final Set<String> WRAPPERS = Set.of("google.protobuf.DoubleValue", "google.protobuf.FloatValue",
            "google.protobuf.Int64Value", "google.protobuf.UInt64Value", "google.protobuf.Int32Value",
            "google.protobuf.UInt32Value", "google.protobuf.BoolValue", "google.protobuf.StringValue",
            "google.protobuf.BytesValue");

    /** One value read: a message's field, an element, a map's key or value. */
    interface Step {
        Object read(Object value) throws BadRecord;
    }

    private RowReader() {
    }

    private static String join(String path, String name) {
        return path.isEmpty() ? name : path + "." + name;
    }

    /** A message of {@code message}'s type as the reader's struct (a {@link GenericRow}). */
    static Step struct(Descriptor message, StructType reader, String path, String where) {
        StructField[] fields = reader.fields();
        FieldDescriptor[] written = new FieldDescriptor[fields.length];
        Step[] steps = new Step[fields.length];
        for (int i = 0; i < fields.length; i++) {
            written[i] = message.findFieldByName(fields[i].name());
            if (written[i] != null) {
                steps[i] = field(written[i], fields[i].dataType(), join(path, fields[i].name()), where);
            }
        }
        return value -> {
            Message m = (Message) value;
            Object[] row = new Object[fields.length];
            for (int i = 0; i < row.length; i++) {
                FieldDescriptor fd = written[i];
                if (fd == null || (fd.hasPresence() && !m.hasField(fd))) {
                    continue;
                }
                row[i] = steps[i].read(m.getField(fd));
            }
            return new GenericRow(row);
        };
    }

    /** The reader of one field's value as {@code getField} gives it (a list for repeated and map fields). */
    private static Step field(FieldDescriptor fd, DataType type, String path, String where) {
        if (fd.isMapField()) {
            MapType map = (MapType) type;
            Descriptor entry = fd.getMessageType();
            FieldDescriptor keyField = entry.findFieldByName("key");
            FieldDescriptor valueField = entry.findFieldByName("value");
            Step key = element(keyField, map.keyType(), path + "{}", where);
            Step val = element(valueField, map.valueType(), path + "{}", where);
            return value -> {
                TreeMap<Object, Object> out = new TreeMap<>();
                for (Object item : (List<?>) value) {
                    Message e = (Message) item;
                    out.put(key.read(e.getField(keyField)), val.read(e.getField(valueField)));
                }
                return out;
            };
        }
        if (fd.isRepeated()) {
            Step one = element(fd, ((ArrayType) type).elementType(), path + "[]", where);
            return value -> {
                List<?> items = (List<?>) value;
                List<Object> out = new ArrayList<>(items.size());
                for (Object item : items) {
                    out.add(one.read(item));
                }
                return out;
            };
        }
        return element(fd, type, path, where);
    }

    /** The reader of one value of a field (an element of a repeated field, a map's key or value). */
    private static Step element(FieldDescriptor fd, DataType type, String path, String where) {
        switch (fd.getJavaType()) {
            case MESSAGE:
                Descriptor message = fd.getMessageType();
                if (message.getFullName().equals(TIMESTAMP)) {
                    return timestamp(message, path);
                }
                if (WRAPPERS.contains(message.getFullName())) {
                    FieldDescriptor inner = message.findFieldByName("value");
                    Step wrapped = element(inner, type, path, where);
                    return value -> wrapped.read(((Message) value).getField(inner));
                }
                return struct(message, (StructType) type, path, where);
            case ENUM:
                EnumDescriptor enumType = fd.getEnumType();
                return value -> {
                    EnumValueDescriptor v = (EnumValueDescriptor) value;
                    if (enumType.findValueByNumber(v.getNumber()) == null) {
                        throw new BadRecord("field '" + path + "': " + v.getNumber() + " is not a value of enum '"
                                + enumType.getFullName() + "' in " + where);
                    }
                    return v.getName();
                };
            default:
                return leaf(fd.getType(), type);
        }
    }

    private static Step leaf(FieldDescriptor.Type writer, DataType reader) {
        Step raw = switch (writer) {
            case UINT32, FIXED32 -> value -> Integer.toUnsignedLong((Integer) value);
            case UINT64, FIXED64 -> value -> new BigDecimal(Long.toUnsignedString((Long) value));
            case BYTES -> value -> ((ByteString) value).toByteArray();
            default -> value -> value;
        };
        if (reader.equals(DataTypes.LongType) && writer.getJavaType() == FieldDescriptor.JavaType.INT) {
            return value -> ((Number) raw.read(value)).longValue();
        }
        if (reader.equals(DataTypes.DoubleType) && isNumber(writer)) {
            return value -> ((Number) raw.read(value)).doubleValue();
        }
        if (reader.equals(DataTypes.FloatType) && isNumber(writer)) {
            return value -> ((Number) raw.read(value)).floatValue();
        }
        if (reader instanceof DecimalType decimal) {
            return value -> {
                Object v = raw.read(value);
                BigDecimal d = v instanceof BigDecimal b ? b : BigDecimal.valueOf(((Number) v).longValue());
                return d.setScale(decimal.scale());
            };
        }
        return raw;
    }

    private static boolean isNumber(FieldDescriptor.Type type) {
        return switch (type.getJavaType()) {
            case INT, LONG, FLOAT, DOUBLE -> true;
            default -> false;
        };
    }

    private static Step timestamp(Descriptor message, String path) {
        FieldDescriptor secondsField = message.findFieldByName("seconds");
        FieldDescriptor nanosField = message.findFieldByName("nanos");
        return value -> {
            Message m = (Message) value;
            long seconds = (Long) m.getField(secondsField);
            int nanos = (Integer) m.getField(nanosField);
            if (seconds < MIN_SECONDS || seconds > MAX_SECONDS || nanos < 0 || nanos > 999_999_999) {
                throw new BadRecord("field '" + path + "': Timestamp seconds=" + seconds + " nanos=" + nanos
                        + " is not a valid Timestamp (0001-01-01 to 9999-12-31, nanos 0 to 999,999,999)");
            }
            if (nanos % 1000 != 0) {
                String when = LocalDateTime.ofEpochSecond(seconds, 0, ZoneOffset.UTC).format(SECONDS);
                throw new BadRecord("field '" + path + "': " + when + "." + String.format("%09d", nanos)
                        + "Z has more precision than a timestamp column holds (microseconds)");
            }
            return Instant.ofEpochSecond(seconds, nanos);
        };
    }

    /** Whether a message, or one nested in it, holds fields its type does not declare (or on another wire type). */
    static boolean holdsUnknownFields(Message message) {
        if (!message.getUnknownFields().asMap().isEmpty()) {
            return true;
        }
        for (FieldDescriptor fd : MESSAGE_FIELDS.computeIfAbsent(message.getDescriptorForType(), RowReader::messages)) {
            if (fd.isRepeated()) {
                for (Object item : (List<?>) message.getField(fd)) {
                    if (holdsUnknownFields((Message) item)) {
                        return true;
                    }
                }
            } else if (message.hasField(fd) && holdsUnknownFields((Message) message.getField(fd))) {
                return true;
            }
        }
        return false;
    }

    private static final Map<Descriptor, FieldDescriptor[]> MESSAGE_FIELDS = new ConcurrentHashMap<>();

    /** A message type's fields that hold messages (map fields among them: their entries are messages). */
    private static FieldDescriptor[] messages(Descriptor type) {
        return type.getFields().stream().filter(f -> f.getJavaType() == FieldDescriptor.JavaType.MESSAGE)
                .toArray(FieldDescriptor[]::new);
    }
}
