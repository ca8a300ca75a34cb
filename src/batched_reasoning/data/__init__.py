"""Prompts and end tokens, answer grading, MATH-500-format records, Hub downloads."""
