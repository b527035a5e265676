"""Records in, summaries out: the Summarizer (`summarizer.py`) and the parts it is built from —
preparing records (`preprocess.py`), a long record's pieces and merges planned (`pieces.py`) and fed
beside other work (`long_records.py`), a finished sequence into a Summary (`summary_assembly.py`),
finished sequences into results (`result_collector.py`), offline results in input order (`in_order.py`).

Kept free of imports: the preprocessing pool's processes import `preprocess` without the engine.
"""
