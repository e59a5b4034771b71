/*
 * csv.c - one CSV record at a time, with RFC 4180 quoting.
 */
#include "sample/csv.h"

#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"

/* Appends one byte to the record's buffer; returns 0, or -1 when it is full. */
static int put(struct sample_csv_record *rec, size_t *used, char c)
{
    if (*used >= rec->buf_size)
        return -1;
    rec->buf[(*used)++] = c;
    return 0;
}

enum sample_csv_status sample_csv_parse_line(const char *text, char sep,
                                             struct sample_csv_record *rec, size_t *consumed)
{
    const char *p = text;
    size_t used = 0;

    rec->count = 0;
    for (;;) {
        if (rec->count == rec->max_fields)
            return SAMPLE_CSV_TOO_MANY_FIELDS;
        rec->fields[rec->count] = rec->buf + used;
        if (*p == '"') {
            p++;
            for (;;) {
                if (*p == '\0' || *p == '\n')
                    return SAMPLE_CSV_UNTERMINATED_QUOTE;
                if (*p == '"' && p[1] == '"') {
                    if (put(rec, &used, '"') != 0)
                        return SAMPLE_CSV_BUFFER_FULL;
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else {
                    if (put(rec, &used, *p++) != 0)
                        return SAMPLE_CSV_BUFFER_FULL;
                }
            }
            if (*p != sep && *p != '\n' && *p != '\0' && !(*p == '\r' && p[1] == '\n'))
                return SAMPLE_CSV_TEXT_AFTER_QUOTE;
        } else {
            while (*p != sep && *p != '\n' && *p != '\0' && !(*p == '\r' && p[1] == '\n'))
                if (put(rec, &used, *p++) != 0)
                    return SAMPLE_CSV_BUFFER_FULL;
        }
        if (put(rec, &used, '\0') != 0)
            return SAMPLE_CSV_BUFFER_FULL;
        rec->count++;
        if (*p == sep) {
            p++;
            continue;
        }
        if (*p == '\r')
            p++;
        if (*p == '\n')
            p++;
        *consumed = (size_t)(p - text);
        return SAMPLE_CSV_OK;
    }
}

const char *sample_csv_status_text(enum sample_csv_status status)
{
    switch (status) {
    case SAMPLE_CSV_OK:
        return "ok";
    case SAMPLE_CSV_TOO_MANY_FIELDS:
        return "too many fields";
    case SAMPLE_CSV_BUFFER_FULL:
        return "record does not fit the buffer";
    case SAMPLE_CSV_UNTERMINATED_QUOTE:
        return "quoted field is not terminated";
    case SAMPLE_CSV_TEXT_AFTER_QUOTE:
        return "text after a closing quote";
    }
    return "unknown status";
}

uint32_t sample_csv_selftest(void)
{
    static const char table[] = "name,qty,price,note\r\n"
                                "apple,3,0.50,\"red, crisp\"\n"
                                "\"pear \"\"conference\"\"\",12,0.35,\n"
                                "fig,,1.20,\"\"\n";
    const char *fields[8];
    char buf[128];
    struct sample_csv_record rec = { fields, 8, 0, buf, sizeof buf };
    const char *p = table;
    size_t consumed = 0, rows = 0;
    long total_qty = 0;
    uint32_t digest = 0;
    int all_ok = 1;

    while (*p != '\0') {
        if (sample_csv_parse_line(p, ',', &rec, &consumed) != SAMPLE_CSV_OK || rec.count != 4) {
            all_ok = 0;
            break;
        }
        if (rows == 1)
            SAMPLE_CHECK_STR(rec.fields[3], "red, crisp");
        if (rows == 2)
            SAMPLE_CHECK_STR(rec.fields[0], "pear \"conference\"");
        if (rows == 3) {
            SAMPLE_CHECK_STR(rec.fields[1], "");
            SAMPLE_CHECK_STR(rec.fields[3], "");
        }
        if (rows > 0)
            total_qty += strtol(rec.fields[1], NULL, 10);
        for (size_t f = 0; f < rec.count; f++)
            digest = sample_digest_str(digest, rec.fields[f]);
        p += consumed;
        rows++;
    }
    SAMPLE_CHECK(all_ok);
    SAMPLE_CHECK_EQ(rows, 4);
    SAMPLE_CHECK_EQ(total_qty, 15);

    SAMPLE_CHECK_EQ(sample_csv_parse_line("a;b;c", ';', &rec, &consumed), SAMPLE_CSV_OK);
    SAMPLE_CHECK_EQ(rec.count, 3);
    SAMPLE_CHECK_EQ(consumed, 5);
    SAMPLE_CHECK_EQ(sample_csv_parse_line("\"open", ',', &rec, &consumed),
                    SAMPLE_CSV_UNTERMINATED_QUOTE);
    SAMPLE_CHECK_EQ(sample_csv_parse_line("\"a\"b", ',', &rec, &consumed),
                    SAMPLE_CSV_TEXT_AFTER_QUOTE);
    SAMPLE_CHECK_EQ(sample_csv_parse_line("1,2,3,4,5,6,7,8,9", ',', &rec, &consumed),
                    SAMPLE_CSV_TOO_MANY_FIELDS);
    rec.buf_size = 4;
    SAMPLE_CHECK_EQ(sample_csv_parse_line("abcdef", ',', &rec, &consumed), SAMPLE_CSV_BUFFER_FULL);
    SAMPLE_CHECK_STR(sample_csv_status_text(SAMPLE_CSV_BUFFER_FULL),
                     "record does not fit the buffer");
    return digest;
}
