package io.tidemark.spark;

/** A value that cannot be a row: its message is the record's {@code error} in the dead letters. */
final class BadRecord extends Exception {
    private static final long serialVersionUID = 1L;

    BadRecord(String why) {
        super(why, null, false, false); // no stack trace: bad records are data, not bugs
    }
}
