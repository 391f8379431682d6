FROM python:3.11-slim
RUN useradd --create-home --uid 10001 gpuops
WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY handlers ./handlers
COPY templates ./templates
RUN pip install --no-cache-dir -e .   # editable: templates/ stay beside the code
USER gpuops
ENV GPUOPS_DATA_DIR=/home/gpuops/data GPUOPS_INVENTORY=/config/inventory.yml GPUOPS_HTTP_HOST=0.0.0.0
EXPOSE 3000
CMD ["gpuops", "serve"]
