/*
 * csv.h - reading one CSV record (RFC 4180 quoting) into fields.
 *
 * Fields are copied into a caller-provided buffer; multi-line records are
 * not supported (a quote must close on the same line).
 */
#ifndef SAMPLE_CSV_H
#define SAMPLE_CSV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Why a record could not be read. */
enum sample_csv_status {
    SAMPLE_CSV_OK = 0,
    SAMPLE_CSV_TOO_MANY_FIELDS,
    SAMPLE_CSV_BUFFER_FULL,
    SAMPLE_CSV_UNTERMINATED_QUOTE,
    SAMPLE_CSV_TEXT_AFTER_QUOTE
};

/* The fields of one record; each field points into the caller's buffer. */
struct sample_csv_record {
    const char **fields;
    size_t max_fields;
    size_t count;
    char *buf;
    size_t buf_size;
};

/*
 * Parses one line (up to '\n' or NUL) of text; on success sets *consumed to
 * the bytes read including the newline.
 */
enum sample_csv_status sample_csv_parse_line(const char *text, char sep,
                                             struct sample_csv_record *rec,
                                             size_t *consumed);

/* Message for a status. */
const char *sample_csv_status_text(enum sample_csv_status status);

/* Self-test of this module; returns its digest. */
uint32_t sample_csv_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_CSV_H */
